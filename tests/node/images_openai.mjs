// Images through `gemmaserve serve` with the official openai SDK (issue 21): image_url data URLs
// (PNG; JPEG + WebP), streamed and not, the prefix cache with images, the 400s (image limit,
// corrupt and truncated files, a host outside --allowed-media-domains), an http URL from a
// loopback server, and the longest gap of running streams while a 1120-token image is encoded.
// usage: node images_openai.mjs BASE_URL IMAGE_DIR GEMMASERVE_BINARY [TEST...]
// The server runs with --limit-mm-per-prompt '{"image": 2}', --allowed-media-domains 127.0.0.1
// and --block-size 16; IMAGE_DIR holds red.png, blue.png, photo.jpg, pic.webp, corrupt.png,
// truncated.jpg (made by tests/scripts/images_e2e.sh with python3-pil).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import OpenAI from 'openai';
import { collect, metric as sharedMetric, tokenizeChat } from './sdk_checks.mjs';

const base = process.argv[2];
const imageDir = process.argv[3];
const binary = process.argv[4];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';
const BLOCK = 16;
const mime = { png: 'image/png', jpg: 'image/jpeg', webp: 'image/webp' };
const file = (name) => readFileSync(`${imageDir}/${name}`);
const dataUrl = (name) => `data:${mime[name.split('.').pop()]};base64,${file(name).toString('base64')}`;
const image = (url) => ({ type: 'image_url', image_url: { url } });
const text = (t) => ({ type: 'text', text: t });
// Text after the images fills whole KV blocks past them (for the prefix-cache checks).
const TAIL = 'Describe every colour you can see in these pictures, one by one, in full sentences, ' +
  'and say which picture is the brightest and which one is the darkest of them all.';
// Soft tokens of an image at a budget, as `gemmaserve preprocess-image` computes them.
const softTokens = (name, budget = 280) => JSON.parse(execFileSync(binary,
  ['preprocess-image', `${imageDir}/${name}`, '--max-soft-tokens', String(budget), '--json'],
).toString()).num_soft_tokens;
const ask = (...urls) => [{ role: 'user', content: [text('Look:'), ...urls.map(image), text(TAIL)] }];

const metric = (name) => sharedMetric(base, name);

const tokenizeCount = (messages, extra = {}) => tokenizeChat(base, MODEL, messages, extra);

// The streamed text and the whole response agree, and usage counts the soft tokens.
async function sameBothWays(messages) {
  const body = { model: MODEL, messages, max_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const chunks = await collect(await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  }));
  const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(streamed, whole.choices[0].message.content);
  const usage = chunks[chunks.length - 1].usage;
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  const tok = await tokenizeCount(messages);
  assert.equal(tok.count, whole.usage.prompt_tokens, '/tokenize counts the expanded prompt');
  return whole;
}

async function expectError(messages, status, message, extra = {}) {
  let err;
  try {
    await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, ...extra });
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'the request succeeded');
  assert.equal(err.status, status, String(err));
  assert.equal(err.error?.message ?? err.message, message);
  assert.equal(err.error?.param, 'messages');
  // The server keeps serving.
  const ok = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2,
  });
  assert.equal(ok.choices.length, 1);
}

// A loopback HTTP server with the test images at /NAME.
async function imageServer() {
  const server = createServer((req, res) => {
    const name = req.url.slice(1);
    try {
      const bytes = file(name);
      res.writeHead(200, { 'Content-Type': mime[name.split('.').pop()] });
      res.end(bytes);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: server.address().port };
}

const tests = {
  async pngDataUrl() {
    const r = await sameBothWays(ask(dataUrl('red.png')));
    const textOnly = await tokenizeCount([{ role: 'user', content: [text('Look:'), text(TAIL)] }]);
    // <|image> + soft tokens + <image|> replace the template's one <|image|>.
    assert.equal(r.usage.prompt_tokens, textOnly.count + softTokens('red.png') + 2);
  },
  async jpegAndWebp() {
    const r = await sameBothWays(ask(dataUrl('photo.jpg'), dataUrl('pic.webp')));
    const one = await tokenizeCount(ask(dataUrl('photo.jpg')));
    assert.equal(r.usage.prompt_tokens, one.count + softTokens('pic.webp') + 2);
  },
  async budgetFromRequest() {
    const small = await tokenizeCount(ask(dataUrl('red.png')), {
      mm_processor_kwargs: { max_soft_tokens: 140 },
    });
    const dflt = await tokenizeCount(ask(dataUrl('red.png')));
    assert.equal(dflt.count - small.count, softTokens('red.png') - softTokens('red.png', 140));
  },
  async prefixCacheWithImages() {
    const body = (url) => ({
      model: MODEL, messages: ask(url), max_tokens: 2, temperature: 0, return_token_ids: true,
    });
    const first = await client.chat.completions.create(body(dataUrl('red.png')));
    const ids = first.prompt_token_ids;
    const soft = ids.indexOf(258880);  // the first soft token (<|image|>)
    const end = soft + softTokens('red.png');
    assert.ok(soft > 0 && ids.length - end > 2 * BLOCK, `prompt ${ids.length}, image ${soft}-${end}`);
    let before = await metric('vllm:prefix_cache_hits_total');
    await client.chat.completions.create(body(dataUrl('red.png')));
    const same = (await metric('vllm:prefix_cache_hits_total')) - before;
    // The identical request reuses blocks past the image.
    assert.ok(same > end, `identical request hit ${same} tokens, image ends at ${end}`);
    before = await metric('vllm:prefix_cache_hits_total');
    await client.chat.completions.create(body(dataUrl('blue.png')));
    const other = (await metric('vllm:prefix_cache_hits_total')) - before;
    // Same text, another image: no block holding (or following) the image is shared.
    assert.ok(other <= Math.floor(soft / BLOCK) * BLOCK, `other image hit ${other}, image at ${soft}`);
  },
  async overTheImageLimit() {
    await expectError(ask(dataUrl('red.png'), dataUrl('blue.png'), dataUrl('photo.jpg')), 400,
      'At most 2 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to increase this limit.');
  },
  async corruptImage() {
    await expectError(ask(dataUrl('corrupt.png')), 400,
      'invalid PNG image: [04][05][06][07]: invalid chunk type');
  },
  async truncatedJpeg() {
    await expectError(ask(dataUrl('truncated.jpg')), 400, 'invalid JPEG image: the data is truncated');
  },
  async httpUrlFromLoopback() {
    const { server, port } = await imageServer();
    try {
      const viaHttp = await client.chat.completions.create({
        model: MODEL, messages: ask(`http://127.0.0.1:${port}/red.png`), max_tokens: 6, temperature: 0,
      });
      const viaData = await client.chat.completions.create({
        model: MODEL, messages: ask(dataUrl('red.png')), max_tokens: 6, temperature: 0,
      });
      assert.equal(viaHttp.choices[0].message.content, viaData.choices[0].message.content);
      assert.equal(viaHttp.usage.prompt_tokens, viaData.usage.prompt_tokens);
      await expectError(ask(`http://localhost:${port}/red.png`), 400,
        "The URL must be from one of the allowed domains: ['127.0.0.1']. Input URL domain: localhost");
      await expectError(ask(`http://127.0.0.1:${port}/missing.png`), 400,
        'Failed to fetch media from URL: HTTP 404 error');
    } finally {
      server.close();
    }
  },
  // Two streams decode while a request with one 1120-token image arrives; the longest pause
  // between their tokens while that image is prefilled is reported.
  async decodesKeepRunningWhileALargeImageIsEncoded() {
    const stamps = [[], []];
    let imageStart = 0;
    let imageEnd = 0;
    const streams = stamps.map(async (times, i) => {
      const s = await client.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: `Count to one thousand, stream ${i}.` }],
        max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true,
      });
      for await (const c of s) {
        if (c.choices[0]?.delta?.content) times.push(performance.now());
        if (imageEnd && performance.now() > imageEnd + 200) break;  // enough after the image
      }
    });
    while (stamps.some((t) => t.length < 5)) await new Promise((r) => setTimeout(r, 10));
    const encoderBefore = await metric('gemmaserve:image_encoder_seconds_total');
    imageStart = performance.now();
    const r = await client.chat.completions.create({
      model: MODEL, messages: ask(dataUrl('big.png')), max_tokens: 1,
      mm_processor_kwargs: { max_soft_tokens: 1120 },
    });
    imageEnd = performance.now();
    const encoderMs = ((await metric('gemmaserve:image_encoder_seconds_total')) - encoderBefore) * 1000;
    await Promise.all(streams);
    let gap = 0;
    let during = 0;
    for (const times of stamps) {
      const inside = times.filter((t) => t >= imageStart && t <= imageEnd);
      during += inside.length;
      for (let k = 1; k < times.length; k++) {
        if (times[k] >= imageStart && times[k - 1] <= imageEnd) gap = Math.max(gap, times[k] - times[k - 1]);
      }
    }
    console.log(`     image request (budget 1120, prompt ${r.usage.prompt_tokens} tokens) took ` +
      `${(imageEnd - imageStart).toFixed(0)} ms; running streams produced ${during} tokens meanwhile, ` +
      `longest gap between their tokens ${gap.toFixed(0)} ms (${softTokens('big.png', 1120)} soft tokens; ` +
      `vision tower ${encoderMs.toFixed(0)} ms of it)`);
    assert.ok(encoderMs > 0, 'the vision tower did not run');
    assert.ok(r.usage.prompt_tokens > softTokens('big.png', 1120));
    assert.ok(stamps.every((t) => t.length > 5));
  },
};

let failures = 0;
const only = process.argv.slice(5);
for (const [name, fn] of Object.entries(tests)) {
  if (only.length && !only.includes(name)) continue;
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   images.${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures += 1;
    console.log(`FAIL images.${name}: ${e.stack ?? e}`);
  }
}
process.exit(failures ? 1 : 0);
