package jstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// ServerWith starts a nats-server with JetStream on a free port of 127.0.0.1, with
// its options changed by configure (authentication, TLS), and shuts it down at
// cleanup. The client URL is nats://127.0.0.1:<port> (srv.Addr() for other schemes).
func ServerWith(t testing.TB, configure func(o *server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	if configure != nil {
		configure(o)
	}
	return start(t, o, "options")
}

// ServerFromFile starts a nats-server from a configuration file (server.ProcessConfigFile:
// its accounts, users and permissions), listening on a free port of 127.0.0.1 with its
// JetStream store in t's temp dir whatever the file says, with its options then changed
// by configure (e.g. MaxPayload), and shuts it down at cleanup.
func ServerFromFile(t testing.TB, path string, configure ...func(o *server.Options)) *server.Server {
	t.Helper()
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server config %s: %v", path, err)
	}
	o.Host, o.Port, o.HTTPPort, o.Cluster.Port, o.LeafNode.Port = "127.0.0.1", -1, 0, 0, 0
	o.StoreDir, o.NoLog, o.NoSigs = t.TempDir(), true, true
	for _, c := range configure {
		c(o)
	}
	return start(t, o, "options of "+path)
}

// start starts a nats-server with o, waits until it takes clients and shuts it down at
// cleanup; what names o in a failure.
func start(t testing.TB, o *server.Options, what string) *server.Server {
	t.Helper()
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("nats-server %s: %v", what, err)
	}
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

// HostPort is the address clients dial, for URLs of any scheme (tls://…).
func HostPort(ns *server.Server) string { return ns.Addr().(*net.TCPAddr).String() }

// WriteFile writes data to a new file of t's temp dir, readable by the owner only.
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TLSFiles are PEM files made for one test: a CA, a server certificate it signed for
// 127.0.0.1 and localhost, a client certificate it signed, and a client certificate
// of another CA (which signed nothing else).
type TLSFiles struct {
	CA, ServerCert, ServerKey string
	ClientCert, ClientKey     string
	OtherCA                   string
	OtherCert, OtherKey       string
}

// NewTLS generates TLSFiles (ECDSA P-256 keys).
func NewTLS(t testing.TB) TLSFiles {
	t.Helper()
	ca, caKey := newCA(t, "compactor test CA")
	other, otherKey := newCA(t, "another CA")
	var f TLSFiles
	f.CA = WriteFile(t, "ca.pem", certPEM(ca))
	f.OtherCA = WriteFile(t, "other-ca.pem", certPEM(other))
	f.ServerCert, f.ServerKey = leaf(t, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf(t, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	f.OtherCert, f.OtherKey = leaf(t, "other-client", other, otherKey, x509.ExtKeyUsageClientAuth)
	return f
}

// Configure returns the server options of TLS with f's server certificate; verify
// also requires a client certificate signed by f.CA.
func (f TLSFiles) Configure(verify bool) func(o *server.Options) {
	return func(o *server.Options) {
		cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
		if err != nil {
			panic(err)
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if verify {
			pool := x509.NewCertPool()
			data, err := os.ReadFile(f.CA)
			if err != nil || !pool.AppendCertsFromPEM(data) {
				panic("jstest: bad CA file")
			}
			cfg.ClientCAs = pool
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		o.TLS = true
		o.TLSVerify = verify
		o.TLSConfig = cfg
		o.TLSTimeout = 5
	}
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// leaf writes a certificate signed by ca and its key; the paths are returned.
func leaf(t testing.TB, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile := WriteFile(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile := WriteFile(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// NKeyUser creates a user NKey: its public key (for server.NkeyUser) and a file
// holding its seed, which is returned too (tests check it never leaks).
func NKeyUser(t testing.TB) (pub, seedFile, seed string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return pub, WriteFile(t, "user.nk", s), string(s)
}

// Operator is a NATS operator with a system account and one account with JetStream,
// for a server in operator (decentralized JWT) mode with a memory resolver.
type Operator struct {
	claims  *jwt.OperatorClaims
	sysPub  string
	sysJWT  string
	accPub  string
	accJWT  string
	account nkeys.KeyPair
}

// NewOperator creates the operator and its accounts.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	opKP, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := opKP.PublicKey()
	op := &Operator{claims: jwt.NewOperatorClaims(opPub)}
	op.claims.Name = "compactor-test"
	// Self-signed, as nsc makes it; the server reads the claims.
	if _, err := op.claims.Encode(opKP); err != nil {
		t.Fatal(err)
	}

	sysKP, _ := nkeys.CreateAccount()
	op.sysPub, _ = sysKP.PublicKey()
	sys := jwt.NewAccountClaims(op.sysPub)
	sys.Name = "SYS"
	if op.sysJWT, err = sys.Encode(opKP); err != nil {
		t.Fatal(err)
	}

	op.account, _ = nkeys.CreateAccount()
	op.accPub, _ = op.account.PublicKey()
	acc := jwt.NewAccountClaims(op.accPub)
	acc.Name = "COMPACTOR"
	acc.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	if op.accJWT, err = acc.Encode(opKP); err != nil {
		t.Fatal(err)
	}
	return op
}

// Configure puts a server in operator mode trusting op, with op's accounts in a
// memory resolver.
func (op *Operator) Configure(o *server.Options) {
	r := &server.MemAccResolver{}
	if err := r.Store(op.sysPub, op.sysJWT); err != nil {
		panic(err)
	}
	if err := r.Store(op.accPub, op.accJWT); err != nil {
		panic(err)
	}
	o.TrustedOperators = []*jwt.OperatorClaims{op.claims}
	o.AccountResolver = r
	o.SystemAccount = op.sysPub
}

// Server starts a server in operator mode trusting op (ServerWith) and registers op's
// JetStream account before any client connects. Without that, the account is
// registered by its first clients; when two of them connect at once (serve and a CLI
// command), nats-server 2.15.2 was seen failing the first stream creation with "could
// not create storage directory" (its account directory was not there yet).
func (op *Operator) Server(t testing.TB, configure func(o *server.Options)) *server.Server {
	t.Helper()
	ns := ServerWith(t, func(o *server.Options) {
		op.Configure(o)
		if configure != nil {
			configure(o)
		}
	})
	acc, err := ns.LookupAccount(op.accPub)
	if err != nil {
		t.Fatalf("register account: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !acc.JetStreamEnabled() {
		if time.Now().After(deadline) {
			t.Fatal("jetstream not enabled for the account after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ns
}

// Creds writes the credentials file (user JWT and NKey seed) of a new user of op's
// JetStream account; the file's contents are returned too (tests check they never
// leak).
func (op *Operator) Creds(t testing.TB) (file, contents string) {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "compactor"
	ujwt, err := uc.Encode(op.account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	return WriteFile(t, "user.creds", creds), string(creds)
}

// Stop shuts ns down, as a crash or a restart would, and returns a function that
// starts it again on the same address with the same JetStream store: clients of the
// first reconnect to the second. (Enabling JetStream on a running server instead races
// with the API requests it is serving, inside nats-server.)
func Stop(t testing.TB, ns *server.Server) (restart func() *server.Server) {
	t.Helper()
	port := ns.Addr().(*net.TCPAddr).Port
	dir := ns.JetStreamConfig().StoreDir
	ns.Shutdown()
	ns.WaitForShutdown()
	return func() *server.Server {
		t.Helper()
		return ServerWith(t, func(o *server.Options) { o.Port, o.StoreDir = port, dir })
	}
}
