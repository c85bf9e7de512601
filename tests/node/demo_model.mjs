// The trained demo model behind `gemmaserve serve`, through the official openai SDK: held-out
// sums and differences answered exactly with finish_reason "stop", capitals named, a get_weather
// tool call for the asked city received as tool_calls and a final answer that repeats the tool
// result, thinking split off.
//   node demo_model.mjs BASE_URL HELDOUT_FILE COUNT MIN_ACCURACY
import fs from "node:fs";
import OpenAI from "openai";

const [base, heldoutFile, countArg, minAccuracy] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none" });
const model = "gemma4-demo";
let failures = 0;
function check(name, ok, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : `: ${detail}`}`);
  if (!ok) failures++;
}

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "The city name" } },
      required: ["city"],
    },
  },
};

const chat = (messages, extra = {}) =>
  client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 48, ...extra });

// Held-out arithmetic: an even spread of COUNT problems over the list.
const problems = fs
  .readFileSync(heldoutFile, "utf8")
  .split("\n")
  .filter((l) => l && !l.startsWith("#"))
  .map((l) => l.match(/^(\d+) ([+-]) (\d+) = (\d+)$/));
const count = Math.min(Number(countArg), problems.length);
const picked = Array.from({ length: count }, (_, i) => problems[Math.floor((i * problems.length) / count)]);
const answers = await Promise.all(
  picked.map((m) => chat([{ role: "user", content: `What is ${m[1]} ${m[2]} ${m[3]}?` }])),
);
let correct = 0;
let wellFormed = 0;
const wrong = [];
answers.forEach((r, i) => {
  const m = picked[i];
  const want = `${m[1]} ${m[2]} ${m[3]} = ${m[4]}.`;
  const c = r.choices[0];
  const stopped = c.finish_reason === "stop";
  if (stopped && c.message.content === want) correct++;
  else wrong.push(`${want} -> ${JSON.stringify(c.message.content)} (${c.finish_reason})`);
  // The answer's form: the question's operands, then a number, ended by <turn|>.
  if (stopped && new RegExp(`^${m[1]} \\${m[2]} ${m[3]} = \\d+\\.$`).test(c.message.content)) wellFormed++;
});
console.log(`held-out arithmetic: ${correct}/${count} exact; wrong e.g. ${wrong.slice(0, 3).join("; ")}`);
check(`held-out answers well formed with finish_reason stop`, wellFormed === count, `${wellFormed}/${count}`);
check(`held-out accuracy >= ${minAccuracy}`, correct >= Number(minAccuracy) * count, `${correct}/${count}`);

// Capitals it was taught (a spread of the 30), in the issue's phrasing.
const CAPITALS = [
  ["France", "Paris"],
  ["Japan", "Tokyo"],
  ["Peru", "Lima"],
  ["Kenya", "Nairobi"],
  ["Canada", "Ottawa"],
];
for (const [country, city] of CAPITALS) {
  const r = await chat([{ role: "user", content: `What is the capital of ${country}?` }]);
  check(
    `capital of ${country} named`,
    r.choices[0].message.content === `The capital of ${country} is ${city}.` &&
      r.choices[0].finish_reason === "stop",
    JSON.stringify(r.choices[0]),
  );
}

const question = [{ role: "user", content: "What's the weather in Lyon?" }];
const call = await chat(question, { tools: [WEATHER_TOOL] });
const calls = call.choices[0].message.tool_calls ?? [];
check(
  "tool call received as tool_calls",
  call.choices[0].finish_reason === "tool_calls" &&
    calls.length === 1 &&
    calls[0].function.name === "get_weather" &&
    JSON.parse(calls[0].function.arguments).city === "Lyon",
  JSON.stringify(call.choices[0]),
);
if (calls.length === 1) {
  const final = await chat(
    [
      ...question,
      call.choices[0].message,
      { role: "tool", tool_call_id: calls[0].id, content: JSON.stringify({ temperature: 21, condition: "sunny" }) },
    ],
    { tools: [WEATHER_TOOL] },
  );
  const text = final.choices[0].message.content ?? "";
  check(
    "final answer uses the tool result",
    final.choices[0].finish_reason === "stop" && text === "It is sunny in Lyon, 21 degrees C.",
    JSON.stringify(final.choices[0]),
  );
}

const thought = await chat([{ role: "user", content: "What is the capital of Japan?" }], {
  chat_template_kwargs: { enable_thinking: true },
});
const msg = thought.choices[0].message;
check(
  "thinking: reasoning split from the answer",
  typeof msg.reasoning === "string" && msg.reasoning.length > 0 && msg.content === "The capital of Japan is Tokyo.",
  JSON.stringify(msg),
);
process.exit(failures === 0 ? 0 : 1);
