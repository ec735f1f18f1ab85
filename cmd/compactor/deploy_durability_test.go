package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Every server the deployment files start flushes each JetStream write to disk before
// acknowledging it (sync_interval: always): nats-server's default flushes every 2
// minutes, and an OS crash or a power loss loses what was acknowledged since
// (docs/guarantees.md, "Durability below the process").
//
// checkDurability reads every server configuration under deploy/ with nats-server's own
// parser, the Compose NATS services' configurations as they run them, and the Helm
// values' jetstream block. The Kubernetes manifests start no server (the Helm chart
// does), and the systemd unit runs compactor serve, whose embedded server syncs every
// write (jetstream/embedded's tests hold that).
func (d *deployment) checkDurability(p *problems) {
	// Every .conf file: each is a server configuration (run as is, or included).
	confVar := regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`)
	_ = filepath.WalkDir(filepath.Join(d.root, "deploy"), func(pth string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(pth, ".conf") {
			return nil
		}
		rel, _ := filepath.Rel(d.root, pth)
		rel = filepath.ToSlash(rel)
		text, rerr := os.ReadFile(pth)
		if rerr != nil {
			p.addf("%s: %v", rel, rerr)
			return nil
		}
		// The variables it reads (passwords, the server name) set to placeholders.
		vars := map[string]string{}
		for _, m := range confVar.FindAllStringSubmatch(string(text), -1) {
			vars[m[1]] = "placeholder-" + strings.ToLower(m[1])
		}
		// An included file's variables too.
		for _, inc := range regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s;]+)`).FindAllStringSubmatch(string(text), -1) {
			if b, err := os.ReadFile(filepath.Join(filepath.Dir(pth), inc[1])); err == nil {
				for _, m := range confVar.FindAllStringSubmatch(string(b), -1) {
					vars[m[1]] = "placeholder-" + strings.ToLower(m[1])
				}
			}
		}
		var opts *server.Options
		withEnv(vars, func() { opts, err = server.ProcessConfigFile(pth) })
		switch {
		case err != nil:
			p.addf("%s: %v", rel, err)
		case !opts.JetStream && !bytes.Contains(text, []byte("jetstream")):
			// Not a JetStream server's configuration.
		case !opts.SyncAlways:
			p.addf("%s: JetStream does not sync every write (sync_interval %s): set sync_interval: always in its jetstream block, "+
				"or an OS crash or power loss loses acknowledged messages", rel, opts.SyncInterval)
		}
		return nil
	})

	// The Compose NATS nodes, with the configuration and environment they run.
	var ignored problems // composeNATS's own problems are checkCompose's
	for _, n := range d.composeNATS(&ignored) {
		if n.opts != nil && !n.opts.SyncAlways {
			p.addf("%s: service %s: its server (%s) does not sync every write: set sync_interval: always in the jetstream block",
				composePath, n.name, filepath.Base(n.confHost))
		}
	}

	// The Helm chart's jetstream block replaces accounts.conf's: it says it again.
	if d.helm != nil {
		if v := str(dig(d.helm, "config", "jetstream", "merge", "sync_interval")); v != "always" {
			p.addf("%s: config.jetstream.merge.sync_interval is %q: the chart's jetstream block replaces accounts.conf's, "+
				"so it must set sync_interval: always itself", helmValuesPath, v)
		}
	}
}

// TestShippedServersSyncEveryWrite: the shipped server configurations all sync every
// write.
func TestShippedServersSyncEveryWrite(t *testing.T) {
	p := problems{}
	d := loadDeployment(repoRoot, nil, &p)
	d.checkDurability(&p)
	for _, s := range p {
		t.Error(s)
	}
	// The check read something: the Compose nodes and the Helm values.
	var ignored problems
	if len(d.composeNATS(&ignored)) == 0 || d.helm == nil {
		t.Fatal("the deployment's servers were not read")
	}
}

// Each way to lose the setting is caught: a copy of the files with it removed or
// replaced by an interval fails the check.
func TestDurabilityCheckCatchesLazyServers(t *testing.T) {
	type edit struct{ old, new string }
	tests := []struct {
		name  string
		file  string
		edits []edit
		want  string
	}{
		{"cluster without it", "deploy/nats/cluster.conf", []edit{{"  sync_interval: always\n", ""}}, "service nats-1"},
		{"cluster with an interval", "deploy/nats/cluster.conf", []edit{{"sync_interval: always", "sync_interval: \"120s\""}}, "deploy/nats/cluster.conf: JetStream does not sync every write (sync_interval 2m0s)"},
		{"accounts without it", accountsPath, []edit{{"  sync_interval: always\n", ""}}, "deploy/nats/accounts.conf: JetStream does not sync every write"},
		{"tenants without it", "deploy/nats/tenants.conf", []edit{{"  sync_interval: always\n", ""}}, "deploy/nats/tenants.conf: JetStream does not sync every write"},
		{"a new configuration without it", "deploy/nats/leaf.conf", []edit{{"", "jetstream {\n  store_dir: /data\n}\n"}}, "deploy/nats/leaf.conf: JetStream does not sync every write"},
		{"Helm without it", helmValuesPath, []edit{{"      sync_interval: always\n", "      sync_interval: 1m\n"}}, "config.jetstream.merge.sync_interval is \"1m\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := deployCopy(t)
			file := filepath.Join(root, tt.file)
			data, err := os.ReadFile(file)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			for _, e := range tt.edits {
				if !bytes.Contains(data, []byte(e.old)) {
					t.Fatalf("%s holds no %q to break", tt.file, e.old)
				}
				data = bytes.Replace(data, []byte(e.old), []byte(e.new), 1)
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			p := problems{}
			d := loadDeployment(root, nil, &p)
			p = problems{}
			d.checkDurability(&p)
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tt.want) }) {
				t.Errorf("no problem mentions %q; found:\n%s", tt.want, strings.Join(p, "\n"))
			}
		})
	}
}
