package powerloss_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// shippedConf is the server config Compactor ships for a nats-server of its own.
const shippedConf = "../../deploy/nats/accounts.conf"

var natsServer struct {
	once sync.Once
	dir  string // removed by TestMain
	bin  string
	err  error
}

// natsServerBinary builds nats-server at go.mod's version, once per test binary. When
// it cannot be built the test is skipped, and fails with CI=true.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	natsServer.once.Do(func() {
		if natsServer.dir, natsServer.err = os.MkdirTemp("", "powerloss-nats-server-"); natsServer.err != nil {
			return
		}
		bin := filepath.Join(natsServer.dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsServer.err = fmt.Errorf("go build github.com/nats-io/nats-server/v2: %v: %s", err, out)
			return
		}
		natsServer.bin = bin
	})
	if natsServer.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a nats-server binary is needed (CI=true): %v", natsServer.err)
		}
		t.Skipf("no nats-server binary: %v", natsServer.err)
	}
	return natsServer.bin
}

// The passwords of the config's users, from the environment as it reads them.
var confUsers = []string{"SYS", "ADMIN", "TRIGGER", "WORKER", "API", "PRODUCER", "READER", "PROXY"}

const adminPassword = "powerloss-admin"

// startNATSServer starts the nats-server binary with conf on a data directory, on a
// free port of 127.0.0.1.
func startNATSServer(bin, conf string) func(t *testing.T, dataDir string) *process {
	return func(t *testing.T, dataDir string) *process {
		t.Helper()
		ports := t.TempDir()
		cmd := exec.Command(bin, "-c", conf, "-a", "127.0.0.1", "-p", "-1", "-sd", dataDir, "--ports_file_dir", ports)
		cmd.Env = os.Environ()
		for _, u := range confUsers {
			pw := "powerloss-" + u
			if u == "ADMIN" {
				pw = adminPassword
			}
			cmd.Env = append(cmd.Env, "NATS_"+u+"_PASSWORD="+pw)
		}
		return startProcess(t, cmd, func(p *process, stdout io.Reader) error {
			exited := make(chan struct{}) // its standard output closes when it exits
			go func() {
				_, _ = io.Copy(io.Discard, stdout)
				close(exited)
			}()
			// The server writes its ports file once it accepts clients.
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				if url, err := readPortsFile(ports); err == nil {
					p.url, p.note = url, conf
					return nil
				} else if !errors.Is(err, os.ErrNotExist) {
					return err
				}
				select {
				case <-exited:
					return errors.New("nats-server exited")
				case <-tick.C:
				}
			}
		})
	}
}

func readPortsFile(dir string) (string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.ports"))
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", os.ErrNotExist
	}
	b, err := os.ReadFile(names[0])
	if err != nil {
		return "", err
	}
	var ports struct {
		Nats []string `json:"nats"`
	}
	if err := json.Unmarshal(b, &ports); err != nil || len(ports.Nats) == 0 {
		return "", os.ErrNotExist // still being written
	}
	return ports.Nats[0], nil
}

// TestShippedConfigSurvivesPowerLoss: a nats-server run with deploy/nats/accounts.conf
// loses no acknowledged message when the power fails.
func TestShippedConfigSurvivesPowerLoss(t *testing.T) {
	bin := natsServerBinary(t)
	conf, err := filepath.Abs(shippedConf)
	if err != nil {
		t.Fatal(err)
	}
	out := run{
		start:      startNATSServer(bin, conf),
		connect:    []nats.Option{nats.UserInfo("admin", adminPassword)},
		publishers: 4, acked: 200,
	}.lose(t)
	wantNoneLost(t, out)
}

// TestShippedConfigLostWithoutSync: the same config without its sync_interval loses
// acknowledged messages: the test above can fail.
func TestShippedConfigLostWithoutSync(t *testing.T) {
	bin := natsServerBinary(t)
	b, err := os.ReadFile(shippedConf)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "accounts.conf")
	b = regexp.MustCompile(`(?m)^\s*sync_interval\s*:.*$`).ReplaceAll(b, nil)
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := run{
		start:      startNATSServer(bin, conf),
		connect:    []nats.Option{nats.UserInfo("admin", adminPassword)},
		publishers: 4, acked: 200, settle: true,
	}.lose(t)
	wantLost(t, out)
}
