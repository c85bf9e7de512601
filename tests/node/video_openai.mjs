// Videos through `gemmaserve serve` with the official openai SDK (issue 41): video_url parts
// (H.264 MP4, VP9 WebM, GIF as data: URLs; an http URL from a loopback server; vLLM's
// data:video/jpeg list of frames), streamed and not, usage = /tokenize, the loader options
// (--media-io-kwargs, the request's media_io_kwargs and mm_processor_kwargs), the prefix cache,
// and the 400s (a truncated clip, one over --max-video-seconds, too many videos), each with the
// server still serving.
// usage: node video_openai.mjs BASE_URL CLIP_DIR GEMMASERVE_BINARY
// The server runs with --limit-mm-per-prompt '{"video": 2}', --max-video-seconds 30,
// --media-io-kwargs '{"video": {"num_frames": 8}}' and --block-size 16; CLIP_DIR holds what
// tests/scripts/video_e2e.sh makes.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import OpenAI from 'openai';
import { collect, metric as sharedMetric, tokenizeChat } from './sdk_checks.mjs';

const base = process.argv[2];
const clipDir = process.argv[3];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';
const BLOCK = 16;
const VIDEO_TOKEN = 258884;  // <|video|>
const BOI = 255999;          // <|image>
// A 64x48, 80x60 or 40x30 frame at the video budget (70): 336x432 pixels, 63 soft tokens.
const SOFT = 63;
// A GIF comes as image/gif, as clients send it; a video part takes it as a clip.
const mime = { mp4: 'video/mp4', webm: 'video/webm', gif: 'image/gif' };
const file = (name) => readFileSync(`${clipDir}/${name}`);
const dataUrl = (name) => `data:${mime[name.split('.').pop()]};base64,${file(name).toString('base64')}`;
const video = (url) => ({ type: 'video_url', video_url: { url } });
const text = (t) => ({ type: 'text', text: t });
const TAIL = 'Describe what happens in these clips, frame by frame, in full sentences, and say ' +
  'which colour changes the most over time and which one stays the same.';
const ask = (...urls) => [{ role: 'user', content: [text('Watch:'), ...urls.map(video), text(TAIL)] }];

const metric = (name) => sharedMetric(base, name);
const tokenize = (messages, extra = {}) => tokenizeChat(base, MODEL, messages, extra);

const count = (ids, id) => ids.filter((t) => t === id).length;

// Frames and soft tokens of a prompt, from its expanded token ids.
async function framesOf(messages, extra = {}) {
  const { tokens } = await tokenize(messages, extra);
  assert.equal(count(tokens, VIDEO_TOKEN) % SOFT, 0);
  return count(tokens, VIDEO_TOKEN) / SOFT;
}

// The streamed text and the whole response agree, and usage counts the soft tokens.
async function sameBothWays(messages) {
  const body = { model: MODEL, messages, max_tokens: 10, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const chunks = await collect(await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  }));
  const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(chunks[chunks.length - 1].usage.prompt_tokens, whole.usage.prompt_tokens);
  const tok = await tokenize(messages);
  assert.equal(tok.count, whole.usage.prompt_tokens, '/tokenize counts the expanded prompt');
  return { whole, tokens: tok.tokens };
}

async function expectError(messages, status, message, param = 'messages', extra = {}) {
  let err;
  try {
    await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, ...extra });
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'the request succeeded');
  assert.equal(err.status, status, String(err));
  assert.equal(err.error?.message ?? err.message, message);
  assert.equal(err.error?.param, param);
  const ok = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2,
  });
  assert.equal(ok.choices.length, 1, 'the server keeps serving');
}

const tests = {
  async mp4DataUrl() {
    const { whole, tokens } = await sameBothWays(ask(dataUrl('short.mp4')));
    // --media-io-kwargs num_frames 8 of the clip's 30 frames, each <|image> + 63 + <image|>.
    assert.equal(count(tokens, VIDEO_TOKEN), 8 * SOFT);
    assert.equal(count(tokens, BOI), 8);
    const textOnly = await tokenize([{ role: 'user', content: [text('Watch:'), text(TAIL)] }]);
    assert.ok(whole.usage.prompt_tokens > textOnly.count + 8 * (SOFT + 2));
  },
  async webmAndGifTogether() {
    const { tokens } = await sameBothWays(ask(dataUrl('clip.webm'), dataUrl('anim.gif')));
    // 24 frames of the WebM sampled to 8; the GIF's 8 frames all taken.
    assert.equal(count(tokens, VIDEO_TOKEN), 16 * SOFT);
  },
  async jpegFramesDataUrl() {
    const frames = ['frame0.jpg', 'frame1.jpg'].map((n) => file(n).toString('base64'));
    const { tokens } = await sameBothWays(ask(`data:video/jpeg;base64,${frames.join(',')}`));
    assert.equal(count(tokens, VIDEO_TOKEN), 2 * SOFT);
  },
  async loaderOptions() {
    const m = ask(dataUrl('short.mp4'));
    assert.equal(await framesOf(m), 8);
    assert.equal(await framesOf(m, { media_io_kwargs: { video: { num_frames: 4 } } }), 4);
    assert.equal(await framesOf(m, { media_io_kwargs: { video: { fps: 1 } } }), 3);  // 3 s at 1/s
    assert.equal(await framesOf(m, { mm_processor_kwargs: { num_frames: 5 } }), 5);
    const r = await client.chat.completions.create({
      model: MODEL, messages: m, max_tokens: 2, media_io_kwargs: { video: { num_frames: 2 } },
    });
    const two = await tokenize(m, { media_io_kwargs: { video: { num_frames: 2 } } });
    assert.equal(r.usage.prompt_tokens, two.count);
    await expectError(m, 400,
      "media_io_kwargs.video: unsupported key 'frames' (num_frames, fps, video_backend, frame_recovery)",
      'media_io_kwargs', { media_io_kwargs: { video: { frames: 2 } } });
  },
  async prefixCacheWithVideo() {
    const body = (name) => ({
      model: MODEL, messages: ask(dataUrl(name)), max_tokens: 2, temperature: 0,
      return_token_ids: true,
    });
    const first = await client.chat.completions.create(body('short.mp4'));
    const ids = first.prompt_token_ids;
    const start = ids.indexOf(VIDEO_TOKEN);
    const end = ids.lastIndexOf(VIDEO_TOKEN) + 1;
    assert.ok(start > 0 && ids.length - end > 2 * BLOCK, `prompt ${ids.length}, video ${start}-${end}`);
    let before = await metric('vllm:prefix_cache_hits_total');
    await client.chat.completions.create(body('short.mp4'));
    const same = (await metric('vllm:prefix_cache_hits_total')) - before;
    assert.ok(same > end, `identical request hit ${same} tokens, video ends at ${end}`);
    before = await metric('vllm:prefix_cache_hits_total');
    await client.chat.completions.create(body('other.mp4'));
    const other = (await metric('vllm:prefix_cache_hits_total')) - before;
    assert.ok(other <= Math.floor(start / BLOCK) * BLOCK, `other clip hit ${other}, video at ${start}`);
  },
  async httpUrlFromLoopback() {
    const server = createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'video/mp4' });
      res.end(file(req.url.slice(1)));
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${server.address().port}/short.mp4`;
      const viaHttp = await client.chat.completions.create({
        model: MODEL, messages: ask(url), max_tokens: 6, temperature: 0,
      });
      const viaData = await client.chat.completions.create({
        model: MODEL, messages: ask(dataUrl('short.mp4')), max_tokens: 6, temperature: 0,
      });
      assert.equal(viaHttp.choices[0].message.content, viaData.choices[0].message.content);
      assert.equal(viaHttp.usage.prompt_tokens, viaData.usage.prompt_tokens);
    } finally {
      server.close();
    }
  },
  async truncatedClip() {
    // The half of short.mp4 the script keeps: its 'mdat' box promises more bytes than there are.
    const bytes = file('short.mp4').length;
    const err = "The video is truncated or corrupt: its 'mdat' box ends at byte ";
    let message = '';
    try {
      await client.chat.completions.create({
        model: MODEL, messages: ask(dataUrl('truncated.mp4')), max_tokens: 2,
      });
    } catch (e) {
      assert.equal(e.status, 400);
      message = e.error?.message ?? '';
    }
    assert.match(message, new RegExp(`^${err}\\d+ but the file has ${Math.floor(bytes / 2)} bytes$`));
    await expectError(ask(dataUrl('truncated.mp4')), 400, message);
  },
  async overLongClip() {
    await expectError(ask(dataUrl('long.mp4')), 400, 'The video is 40.0 s long; the limit is 30 s');
  },
  async overTheVideoLimit() {
    await expectError(ask(dataUrl('short.mp4'), dataUrl('clip.webm'), dataUrl('anim.gif')), 400,
      'At most 2 video(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to increase this limit.');
  },
  async notAVideo() {
    await expectError(ask('data:video/mp4;base64,' + Buffer.from('hello there, not a clip').toString('base64')),
      400, 'The file is not a video this server can read (expected MP4, MOV, WebM, MKV, AVI, GIF or WebP)');
  },
};


for (const [name, test] of Object.entries(tests)) {
  try {
    await test();
    console.log(`ok   video.${name}`);
  } catch (e) {
    console.log(`FAIL video.${name}: ${e.stack ?? e}`);
    process.exitCode = 1;
  }
}
