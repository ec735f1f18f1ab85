// Package proctest runs this module's programs as real processes in tests: it builds
// the binaries (the compactor command, a standalone nats-server, or any other a test
// builds its own way) once per test binary into one temporary directory that Run
// removes, starts processes whose output it keeps in a LogBuffer and shows when the
// test failed, tells an exit the test asked for from one it did not, and hands out
// free ports for servers that must come back on the same one.
//
// A package that builds binaries removes them from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }
package proctest
