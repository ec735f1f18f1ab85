// Package embedded runs an in-process nats-server with JetStream, for the default
// single-binary run (COMPACTOR_NATS_URL empty) and for tests.
package embedded

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// Config says where the embedded server listens and stores.
type Config struct {
	// Listen is host:port for clients; port -1 picks a free one. Default 127.0.0.1:4222.
	Listen string
	// DataDir holds JetStream's files; it is created if missing. A server locks it
	// (the file compactor.lock in it) until Shutdown: a second server on the same
	// directory fails to start with ErrDataDirInUse.
	DataDir string
	// ServerName names the server in logs and cluster views.
	ServerName string
	// ReadyTimeout bounds start-up.
	ReadyTimeout time.Duration
	// SyncInterval is how often the server flushes JetStream's writes to disk. Zero,
	// the default, flushes every write before it is acknowledged (nats-server's
	// sync_interval: always): an acknowledged message survives a process crash, an OS
	// crash and a power loss. A positive interval is nats-server's own behaviour when
	// unset (2 minutes): writes are faster, and what was acknowledged since the last
	// flush is lost with the machine (never with the process alone). Tests and
	// benchmarks that measure the difference set it.
	SyncInterval time.Duration
	// Logger receives the server's own log lines at debug level (warnings and errors at
	// their own levels). The zero logger discards them.
	Logger zerolog.Logger
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("embedded nats: data dir is empty")
	}
	if _, _, err := splitListen(c.Listen); err != nil {
		return err
	}
	return nil
}

func splitListen(listen string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("embedded nats: listen address %q is not host:port: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("embedded nats: listen port %q must be -1 (any free port) or 0-65535", portStr)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}

// Server is a running embedded nats-server.
type Server struct {
	ns   *server.Server
	lock *dirLock
}

// Start locks the data directory, starts the server and waits until it accepts
// connections. A data directory locked by another process is an error matching
// ErrDataDirInUse.
func Start(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:4222"
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "compactor-embedded"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SyncInterval < 0 {
		return nil, fmt.Errorf("embedded nats: sync interval %s is negative; use 0 to sync every write", cfg.SyncInterval)
	}
	host, port, _ := splitListen(cfg.Listen)
	_, statErr := os.Stat(cfg.DataDir)
	created := errors.Is(statErr, fs.ErrNotExist)
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	fail := func() {
		lock.release()
		if created {
			// The directory this start made, and only when nothing but the lock is in it.
			_ = os.Remove(filepath.Join(cfg.DataDir, lockName))
			_ = os.Remove(cfg.DataDir) // fails, and keeps it, when the server wrote in it
		}
	}
	if port > 0 {
		// A taken port is told at once (after the data directory's lock, whose refusal
		// matters more: two servers on one directory corrupt it): the server would only
		// fail to become ready after ReadyTimeout.
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			fail()
			return nil, fmt.Errorf("embedded nats: %w: %s (another nats-server or compactor?): set COMPACTOR_LISTEN to another address, or COMPACTOR_NATS_URL to use that server: %v",
				ErrListenInUse, cfg.Listen, err)
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true,
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	} else {
		// As nats-server's config file sets it for sync_interval: always.
		opts.SyncInterval = 2 * time.Minute
		opts.SyncAlways = true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		fail()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLoggerV2(&logAdapter{log: cfg.Logger}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		fail()
		return nil, fmt.Errorf("embedded nats: not ready after %s (is %s already in use? set COMPACTOR_LISTEN or COMPACTOR_NATS_URL)", cfg.ReadyTimeout, cfg.Listen)
	}
	return &Server{ns: ns, lock: lock}, nil
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// SyncsEveryWrite reports whether the server flushes every JetStream write to disk
// before acknowledging it.
func (s *Server) SyncsEveryWrite() bool {
	return s.ns.JetStreamConfig() != nil && s.ns.JetStreamConfig().SyncAlways
}

// NATS returns the underlying server, for tests that need to inspect it.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server, waits until it is down and releases the data directory.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.lock.release()
}

// logAdapter sends the server's log lines to zerolog.
type logAdapter struct{ log zerolog.Logger }

func (l *logAdapter) Noticef(format string, v ...any) {
	l.log.Debug().Str("component", "nats-server").Msgf(format, v...)
}
func (l *logAdapter) Warnf(format string, v ...any) {
	l.log.Warn().Str("component", "nats-server").Msgf(format, v...)
}
func (l *logAdapter) Fatalf(format string, v ...any) {
	l.log.Error().Str("component", "nats-server").Msgf(format, v...)
}
func (l *logAdapter) Errorf(format string, v ...any) {
	l.log.Error().Str("component", "nats-server").Msgf(format, v...)
}
func (l *logAdapter) Debugf(format string, v ...any) {
	l.log.Debug().Str("component", "nats-server").Msgf(format, v...)
}
func (l *logAdapter) Tracef(format string, v ...any) {
	l.log.Trace().Str("component", "nats-server").Msgf(format, v...)
}
