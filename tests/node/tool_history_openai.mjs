// A multi-turn tool conversation through the official openai SDK against `gemmaserve serve`: the
// assistant tool calls go over the wire as the SDK sends them (function.arguments a JSON string),
// and the prompt the server renders must be, token for token, Hugging Face's: the real template
// rendered by Debian's python3-jinja2 over the messages vLLM hands it
// (tools/render_chat_template.py --vllm-messages), tokenized by @huggingface/tokenizers.
// usage: node tool_history_openai.mjs BASE_URL MODEL_DIR TEMPLATE REPO_ROOT
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { Tokenizer } from '@huggingface/tokenizers';

const [base, modelDir, template, root] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';

const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));
const configPath = path.join(modelDir, 'tokenizer_config.json');
const hfTokenizer = new Tokenizer(readJson(path.join(modelDir, 'tokenizer.json')),
  fs.existsSync(configPath) ? readJson(configPath) : {});

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', description: 'City name' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city'],
    },
  },
}];

// What apply_chat_template gives for the messages as vLLM post-processes them, in HF's ids.
function expectedIds(messages, kwargs) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tool-history-'));
  try {
    const file = path.join(dir, 'conversation.json');
    fs.writeFileSync(file, JSON.stringify([{
      messages, tools, add_generation_prompt: true, chat_template_kwargs: kwargs,
    }]));
    const out = execFileSync('/usr/bin/python3', [
      path.join(root, 'tools/render_chat_template.py'), '--template', template,
      '--conversations', file, '--vllm-messages'], { encoding: 'utf8' });
    const [text] = JSON.parse(out);
    assert.equal(typeof text, 'string', `python render failed: ${JSON.stringify(text)}`);
    return { text, ids: Array.from(hfTokenizer.encode(text, { add_special_tokens: false }).ids, Number) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function tokenize(messages, kwargs) {
  const r = await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, tools, chat_template_kwargs: kwargs }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
}

// The server's prompt for `messages`, read back through /tokenize and usage, against HF's.
async function expectSamePrompt(label, messages, kwargs = {}) {
  const want = expectedIds(messages, kwargs);
  assert.ok(!want.text.includes('"city"'), `${label}: arguments rendered as raw JSON`);
  assert.deepEqual(await tokenize(messages, kwargs), want.ids, `${label}: /tokenize ids`);
  const r = await client.chat.completions.create({
    model: MODEL, messages, tools, max_tokens: 2, temperature: 0,
    chat_template_kwargs: kwargs,
  });
  assert.equal(r.usage.prompt_tokens, want.ids.length, `${label}: usage.prompt_tokens`);
  return want.text;
}

const call = (id, args) => ({
  id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(args) },
});

const question = { role: 'user', content: 'What is the weather in Lyon?' };
const firstCall = { role: 'assistant', content: null, tool_calls: [call('call_1', { city: 'Lyon' })] };
const firstResult = { role: 'tool', tool_call_id: 'call_1', content: '{"sky": "sunny", "temp_c": 21}' };
const answer = { role: 'assistant', content: 'It is sunny in Lyon, 21 °C.' };
const followUp = { role: 'user', content: 'And in Oslo and Zürich, in fahrenheit?' };
const secondCall = {
  role: 'assistant', content: null,
  tool_calls: [call('call_2', { city: 'Oslo', unit: 'fahrenheit' }),
    call('call_3', { unit: 'fahrenheit', city: 'Zürich' })],
};
const secondResults = [
  { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'snow' }, { type: 'text', text: '23 F' }] },
  { role: 'tool', tool_call_id: 'call_3', content: 'cloudy, 50 F' },
];

const turns = [
  ['after the first call', [question, firstCall, firstResult], {}],
  ['follow-up question', [question, firstCall, firstResult, answer, followUp], {}],
  ['after the second call', [question, firstCall, firstResult, answer, followUp, secondCall,
    ...secondResults], {}],
  ['second call with thinking', [question, firstCall, firstResult, answer, followUp,
    { ...secondCall, reasoning: 'Two cities: call the tool twice.' }, ...secondResults],
  { enable_thinking: true }],
];
for (const [label, messages, kwargs] of turns) {
  const text = await expectSamePrompt(label, messages, kwargs);
  assert.ok(text.includes('<|tool_call>call:get_weather{city:<|"|>Lyon<|"|>}<tool_call|>'), label);
  if (messages.includes(secondCall) || kwargs.enable_thinking) {
    assert.ok(text.includes('call:get_weather{city:<|"|>Oslo<|"|>,unit:<|"|>fahrenheit<|"|>}'));
  }
  if (kwargs.enable_thinking) assert.ok(text.includes('<|channel>thought\nTwo cities'), label);
  console.log(`ok   ${label}`);
}
