// npm pack makes a package a user can install: packed from a copy of the package without
// dist/ (so prepack must build what is packed), installed into an empty project with
// npm install <tarball> (which fetches its dependencies, @nats-io/transport-node and
// @nats-io/jetstream, unless npm's cache has them),
// then imported by Node and type-checked by tsc as a user's code would; then each
// framework adapter's subpath with its framework (an optional peer dependency, not
// installed with the client) installed beside it. Needs npm, and the registry or npm's
// cache; npm test runs it (tools/test.ts).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = resolve(fileURLToPath(import.meta.url), "..", "..", ".."); // dist/test → clients/ts

/** Each adapter: its subpath, its framework packages and a user's code that type-checks against them. */
const adapters: Array<{ subpath: string; peers: string[]; exports: string[]; code: string }> = [
  {
    subpath: "ai-sdk",
    peers: ["ai", "zod"],
    exports: ["compactorMiddleware", "toPrompt", "fromPrompt"],
    code: `import { wrapLanguageModel } from "ai";
import { compactorMiddleware } from "@compactor/client/ai-sdk";
import type { Compactor } from "@compactor/client";
export function wrap(c: Compactor, model: Parameters<typeof wrapLanguageModel>[0]["model"]) {
  return wrapLanguageModel({ model, middleware: compactorMiddleware(c, "conv", { waitPendingMs: 1000 }) });
}
`,
  },
  {
    subpath: "openai-agents",
    peers: ["@openai/agents", "zod"],
    exports: ["CompactorSession", "toItems", "fromItems"],
    code: `import { Agent, run, type Session } from "@openai/agents";
import { CompactorSession } from "@compactor/client/openai-agents";
import type { Compactor } from "@compactor/client";
export async function ask(c: Compactor, agent: Agent, text: string): Promise<unknown> {
  const session: Session = new CompactorSession(c, "conv", { waitPendingMs: 1000 });
  return (await run(agent, text, { session })).finalOutput;
}
`,
  },
  {
    subpath: "langchain",
    peers: ["@langchain/core"],
    exports: ["CompactorChatMessageHistory", "toLangChain", "fromLangChain"],
    code: `import { BaseListChatMessageHistory } from "@langchain/core/chat_history";
import { HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { CompactorChatMessageHistory } from "@compactor/client/langchain";
import type { Compactor } from "@compactor/client";
export async function history(c: Compactor): Promise<BaseMessage[]> {
  const h: BaseListChatMessageHistory = new CompactorChatMessageHistory(c, "conv", { waitPendingMs: 1000 });
  await h.addMessage(new HumanMessage("hi"));
  return h.getMessages();
}
`,
  },
];

/** Runs npm (the one running npm test, else npm on PATH) in dir; its stdout. */
function npm(dir: string, ...args: string[]): string {
  const cli = process.env["npm_execpath"];
  const [cmd, argv] = cli && cli.endsWith(".js") ? [process.execPath, [cli, ...args]] : ["npm", args];
  const r = spawnSync(cmd, argv, { cwd: dir, encoding: "utf8", env: { ...process.env, npm_config_loglevel: "error" } });
  if (r.error) throw new Error(`npm ${args.join(" ")}: ${r.error.message} (this test needs npm)`);
  assert.equal(r.status, 0, `npm ${args.join(" ")} in ${dir}: exit ${r.status}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

function run(dir: string, cmd: string, ...args: string[]): string {
  const r = spawnSync(cmd, args, { cwd: dir, encoding: "utf8" });
  assert.equal(r.status, 0, `${cmd} ${args.join(" ")}: ${r.error ?? `exit ${r.status}`}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

test("npm pack makes a package that installs, imports and type-checks", (t) => {
  const tmp = mkdtempSync(join(tmpdir(), "compactor-pack-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));

  const copy = join(tmp, "client");
  for (const f of ["package.json", "CHANGELOG.md", "tsconfig.json", "tsconfig.build.json", "src"]) cpSync(join(pkg, f), join(copy, f), { recursive: true });
  symlinkSync(join(pkg, "node_modules"), join(copy, "node_modules"), "dir");
  const [packed] = JSON.parse(npm(copy, "pack", "--json", "--pack-destination", tmp)) as Array<{ filename: string; files: Array<{ path: string }> }>;
  assert.ok(packed, "npm pack reported no package");
  const paths = packed.files.map((f) => f.path).sort();
  for (const want of ["package.json", "CHANGELOG.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/client.js", "src/index.ts"]) {
    assert.ok(paths.includes(want), `the package lacks ${want}: ${paths.join(", ")}`);
  }
  const stray = paths.filter((p) => p !== "package.json" && p !== "CHANGELOG.md" && !p.startsWith("dist/src/") && !p.startsWith("src/"));
  assert.deepStrictEqual(stray, [], "only the package's code is packed (no tests, examples or tools)");

  const app = join(tmp, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "module" }));
  npm(app, "install", "--no-audit", "--no-fund", "--prefer-offline", join(tmp, packed.filename));
  const installed = JSON.parse(readFileSync(join(app, "node_modules", "@compactor", "client", "package.json"), "utf8"));
  assert.equal(installed.name, "@compactor/client");
  assert.deepStrictEqual(Object.keys(installed.dependencies ?? {}).sort(), ["@nats-io/jetstream", "@nats-io/transport-node"]);
  assert.equal(existsSync(join(app, "node_modules", "nats")), false, "the nats 2.x package is not installed with the client");

  const names = JSON.parse(
    run(app, process.execPath, "--input-type=module", "-e", `const m = await import("@compactor/client"); console.log(JSON.stringify(Object.keys(m)))`),
  ) as string[];
  for (const want of ["Compactor", "connectOptionsFromEnv", "readContext", "BusyError", "RECALL_TOOL"]) {
    assert.ok(names.includes(want), `import("@compactor/client") lacks ${want}: ${names.join(", ")}`);
  }

  // A user's TypeScript finds the types through the package's exports.
  writeFileSync(
    join(app, "index.ts"),
    `import { Compactor, BusyError, type Message } from "@compactor/client";
import { connect } from "@nats-io/transport-node";
const m: Message = { role: "user", content: "hi" };
// A connection of the user's own, made with the NATS package the client depends on.
export async function open(servers: string): Promise<Compactor> {
  return new Compactor(await connect({ servers }), { timeoutMs: 5000 });
}
export async function send(c: Compactor): Promise<number> {
  try {
    return (await c.publish("conv", m)).seq;
  } catch (e) {
    if (e instanceof BusyError) return -1;
    throw e;
  }
}
`,
  );
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, skipLibCheck: true, types: [] }, files: ["index.ts"] }),
  );
  run(app, process.execPath, join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", ".");

  // The adapters: each framework an optional peer, not installed with the client.
  const own = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
  for (const a of adapters) {
    assert.ok(installed.exports[`./${a.subpath}`], `the package does not export ./${a.subpath}`);
    const framework = a.peers[0]!;
    assert.ok(installed.peerDependencies?.[framework], `${framework} is not a peer dependency`);
    assert.equal(installed.peerDependenciesMeta?.[framework]?.optional, true, `${framework} is not an optional peer`);
    assert.equal(existsSync(join(app, "node_modules", framework)), false, `${framework} was installed with the client`);
  }
  const peers = [...new Set(adapters.flatMap((a) => a.peers))].map((p) => `${p}@${own.devDependencies[p]}`);
  npm(app, "install", "--no-audit", "--no-fund", "--prefer-offline", ...peers);
  for (const a of adapters) {
    const got = JSON.parse(
      run(app, process.execPath, "--input-type=module", "-e", `const m = await import("@compactor/client/${a.subpath}"); console.log(JSON.stringify(Object.keys(m)))`),
    ) as string[];
    for (const want of a.exports) assert.ok(got.includes(want), `import("@compactor/client/${a.subpath}") lacks ${want}: ${got.join(", ")}`);
    writeFileSync(join(app, `${a.subpath}.ts`), a.code);
  }
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", lib: ["ES2024", "DOM"], strict: true, noEmit: true, skipLibCheck: true, types: [] },
      files: ["index.ts", ...adapters.map((a) => `${a.subpath}.ts`)],
    }),
  );
  run(app, process.execPath, join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", ".");
});
