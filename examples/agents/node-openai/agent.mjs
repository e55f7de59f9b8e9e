// A weather agent on the OpenAI Node SDK, unchanged: chat completions with one function
// tool, its own loop (each tool call answered and sent back until the model answers in text).
//
// evalkit runs it once per sample with the case as JSON on stdin; OPENAI_BASE_URL and
// OPENAI_API_KEY point at evalkit's metering proxy (the client reads them), so every model
// call is reserved, settled and recorded. The tool answers from the case's fixtures through
// EVALKIT_TOOLS_URL, with the model's id of the call. Its own project: package.json,
// package-lock.json and node_modules (`npm ci`) beside it.
import OpenAI from "openai";

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The current weather in a city.",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function fixture(name, args, id) {
  const resp = await fetch(process.env.EVALKIT_TOOLS_URL, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ name, arguments: args, id }),
  });
  return (await resp.json()).content;
}

async function main() {
  const kase = await readStdin();
  const client = new OpenAI({ maxRetries: 0 });
  const messages = [
    { role: "system", content: "You answer questions about the weather. Look it up with get_weather." },
    { role: "user", content: kase.input.question },
  ];
  for (let turn = 0; turn < 4; turn++) {
    const reply = await client.chat.completions.create({ model: kase.model, messages, tools: TOOLS });
    const message = reply.choices[0].message;
    if (!message.tool_calls?.length) {
      console.log(message.content);
      return;
    }
    messages.push(message);
    for (const call of message.tool_calls) {
      const content = await fixture(call.function.name, JSON.parse(call.function.arguments), call.id);
      messages.push({ role: "tool", tool_call_id: call.id, content });
    }
  }
  throw new Error("no answer after 4 turns");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
