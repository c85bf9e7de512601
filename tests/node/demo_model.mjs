// The trained demo model behind `gemmaserve serve`, through the official openai SDK: held-out
// sums and differences answered exactly with finish_reason "stop", capitals named, a get_weather
// tool call for the asked city received as tool_calls and a final answer that repeats the tool
// result, thinking split off; "Hello" answered with the skills text, and so every greeting and
// out-of-skill question of SKILLS_HELDOUT_FILE (phrasings never trained on).
//   node demo_model.mjs BASE_URL HELDOUT_FILE COUNT MIN_ACCURACY SKILLS_HELDOUT_FILE
import fs from "node:fs";
import OpenAI from "openai";

const [base, heldoutFile, countArg, minAccuracy, skillsHeldoutFile] = process.argv.slice(2);
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
// Greetings and questions outside its skills: the skills text, whole, ended by <turn|>.
const long = { max_tokens: 128 };
const hello = (await chat([{ role: "user", content: "Hello" }], long)).choices[0];
const skills = hello.message.content ?? "";
check(
  "Hello answered with the skills text",
  hello.finish_reason === "stop" &&
    ["two-digit numbers", "capitals", "weather", "thinking", "Try: What is 47 + 38?"].every((s) => skills.includes(s)),
  JSON.stringify(hello),
);
const offSkill = fs
  .readFileSync(skillsHeldoutFile, "utf8")
  .split("\n")
  .filter((l) => l && !l.startsWith("#"));
const offAnswers = await Promise.all(offSkill.map((q) => chat([{ role: "user", content: q }], long)));
const offWrong = offSkill
  .map((q, i) => [q, offAnswers[i].choices[0]])
  .filter(([, c]) => c.finish_reason !== "stop" || c.message.content !== skills)
  .map(([q, c]) => `${JSON.stringify(q)} -> ${JSON.stringify(c.message.content)} (${c.finish_reason})`);
check(
  `held-out greetings and out-of-skill questions answered with the skills text`,
  offWrong.length === 0,
  `${offWrong.length}/${offSkill.length} not: ${offWrong.join("; ")}`,
);
const thinkingHello = (
  await chat([{ role: "user", content: "Hi" }], { max_tokens: 200, chat_template_kwargs: { enable_thinking: true } })
).choices[0].message;
check(
  "thinking on: a thought, then the skills text",
  typeof thinkingHello.reasoning === "string" && thinkingHello.reasoning.length > 0 && thinkingHello.content === skills,
  JSON.stringify(thinkingHello),
);
const poem = (
  await chat([{ role: "user", content: "Write a poem about the sea." }], { ...long, tools: [WEATHER_TOOL] })
).choices[0];
check(
  "with tools declared: an out-of-skill question calls no tool, answers the skills text",
  poem.finish_reason === "stop" && !poem.message.tool_calls?.length && poem.message.content === skills,
  JSON.stringify(poem),
);
process.exit(failures === 0 ? 0 : 1);
