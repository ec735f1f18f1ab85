// `npm test` (after `npm run build`, its pretest): the whole suite, from a fresh clone.
//
// Most tests need servers: a running compactor with a fake LLM, one whose LLM answers
// late, a server with a 16 KiB max payload and no compactor, one server per reader
// fixture, and the users of deploy/nats/accounts.conf. The Go tests TestTSClient and
// TestTSClientUnderRoles start them and run every test file here but pack.test.js with
// node --test against them, so this runs those Go tests (Go is what builds this
// repository), with CI=true: a test that cannot run fails instead of skipping. Then
// pack.test.js, which needs npm rather than a server. Any failure fails npm test.

import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..", ".."); // dist/tools → clients/ts
const root = resolve(pkg, "..", "..");
const goTests = "^(TestTSClient|TestTSClientUnderRoles)$";
const goTestFile = "tsclient_test.go";
// Where the Go tests that run this suite live, the first that has them.
const goPackages = ["internal/systemtest", "cmd/compactor"];
// Test files run here, not by the Go tests.
const ownFiles = ["pack.test.js"];

function fail(msg: string): never {
  console.error(`npm test: ${msg}`);
  process.exit(1);
}

function report(what: string, r: SpawnSyncReturns<Buffer>): boolean {
  if (r.error) fail(`${what}: ${r.error.message}`);
  if (r.status !== 0) console.error(`npm test: ${what} failed (${r.signal ?? `exit ${r.status}`})`);
  return r.status === 0;
}

const goPkg = goPackages.find((p) => existsSync(join(root, p, goTestFile)));
if (!goPkg) fail(`no ${goTestFile} in ${goPackages.join(" or ")} under ${root}: run npm test in clients/ts of a Compactor checkout`);

// Every test file must run somewhere: one the Go tests do not name would never run.
const goSource = readFileSync(join(root, goPkg, goTestFile), "utf8");
const files = readdirSync(join(pkg, "dist", "test")).filter((f) => f.endsWith(".test.js"));
const orphans = files.filter((f) => !ownFiles.includes(f) && !goSource.includes(`"${f}"`));
if (orphans.length > 0) fail(`${orphans.join(", ")} run nowhere: name them in ${join(goPkg, goTestFile)} (TestTSClient's list)`);

const goCmd = ["test", "-count=1", "-v", "-run", goTests, `./${goPkg}`];
console.log(`npm test: go ${goCmd.join(" ")} (in ${relative(process.cwd(), root) || "."}): starts the servers and runs ${files.filter((f) => !ownFiles.includes(f)).join(", ")}`);
const go = spawnSync("go", goCmd, { cwd: root, stdio: "inherit", env: { ...process.env, CI: "true" } });
if ((go.error as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
  fail("go is not on PATH: the tests that need a server run through go test, which starts them; install Go (the version go.mod names)");
}
const goOK = report(`go ${goCmd.join(" ")}`, go);

const own = ownFiles.map((f) => join("dist", "test", f));
console.log(`npm test: node --test ${own.join(" ")}`);
const nodeOK = report("node --test", spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...own], { cwd: pkg, stdio: "inherit" }));

process.exit(goOK && nodeOK ? 0 : 1);
