// A Node.js host of `core-agent serve --stdio`, with nothing but Node's own modules.
//
// It starts the server, runs a task, answers the approval request the task waits on, waits
// for the task's end and prints what it saw as one JSON line on stdout. Usage:
//   node stdio_client.mjs <python> <task text>
// The server's stderr passes through to ours; the exit code is 0 when the task succeeded.
import { spawn } from "node:child_process";

const [python, taskText] = process.argv.slice(2);

class StdioClient {
  constructor(child) {
    this.child = child;
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.waiters = []; // {match, resolve}
    this.notifications = [];
    this.order = []; // "response:<id>" or "<method>:<task_id>", in the order read
    let buffered = "";
    child.stdout.setEncoding("utf8"); // whole characters, even split across chunks
    child.stdout.on("data", (chunk) => {
      buffered += chunk;
      let end;
      while ((end = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 1);
        this.receive(JSON.parse(line));
      }
    });
  }

  receive(message) {
    if ("id" in message && !("method" in message)) {
      this.order.push(`response:${message.id}`);
      const call = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (!call) throw new Error(`a response to no request: ${JSON.stringify(message)}`);
      if ("error" in message) call.reject(new Error(JSON.stringify(message.error)));
      else call.resolve(message.result);
      return;
    }
    this.order.push(`${message.method}:${message.params.task_id}`);
    this.notifications.push(message);
    this.waiters = this.waiters.filter((waiter) => {
      if (!waiter.match(message)) return true;
      waiter.resolve(message.params);
      return false;
    });
  }

  request(method, params) {
    const id = this.nextId++;
    const line = JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n";
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.stdin.write(line, "utf8");
    });
  }

  // The first notification (already received or still to come) that `match` accepts.
  next(match) {
    const seen = this.notifications.find(match);
    if (seen) return Promise.resolve(seen.params);
    return new Promise((resolve) => this.waiters.push({ match, resolve }));
  }
}

const child = spawn(python, ["-m", "core_agent.cli", "serve", "--stdio"], {
  stdio: ["pipe", "pipe", "inherit"],
});
const client = new StdioClient(child);
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
const timer = setTimeout(() => {
  console.error("stdio_client.mjs: no answer within 60 s");
  child.kill();
  process.exit(1);
}, 60_000);

const pong = await client.request("ping", {});
const accepted = await client.request("execute_task", { task: taskText });
const taskId = accepted.task_id;
const asked = await client.next(
  (m) => m.method === "approval/requested" && m.params.task_id === taskId,
);
const decision = await client.request("resolve_approval", {
  request_id: asked.request_id,
  approved: true,
  reason: "Node 说可以",
});
const result = await client.next(
  (m) =>
    m.method === "task/result" &&
    m.params.task_id === taskId &&
    m.params.status !== "waiting_approval",
);
child.stdin.end(); // the end of input shuts the server down
const exitCode = await exited;
clearTimeout(timer);

const events = client.notifications
  .filter((m) => m.method === "task/event" && m.params.task_id === taskId)
  .map((m) => m.params);
const kinds = events.map((event) => event.kind);
const resolved = events.find((event) => event.kind === "approval.resolved");
console.log(
  JSON.stringify({
    pong,
    accepted,
    answeredFirst:
      client.order.indexOf(`response:2`) < client.order.indexOf(`task/event:${taskId}`),
    asked,
    decision,
    result,
    kinds,
    resolvedReason: resolved?.decision.reason,
    exitCode,
  }),
);
process.exit(result.status === "succeeded" && exitCode === 0 ? 0 : 1);
