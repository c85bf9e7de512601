// Audio through `gemmaserve serve` with the official openai SDK (issue 38, the unified model's
// embedders): input_audio parts (WAV, 16 kHz and 22.05 kHz) and audio_url data URLs, streamed and
// not, with an image in the same message, /tokenize, and the 400s (malformed parts, corrupt and
// truncated files, a non-audio data URL, the --limit-mm-per-prompt audio limit).
// usage: node audio_openai.mjs BASE_URL AUDIO_DIR IMAGE_DIR
// The server runs the tiny-unified preset (640 samples per soft token at 16 kHz) with
// --limit-mm-per-prompt '{"audio": 2}'.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const base = process.argv[2];
const audioDir = process.argv[3];
const imageDir = process.argv[4];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';
const SAMPLES_PER_TOKEN = 640;

const wav = (name) => readFileSync(`${audioDir}/${name}`);
// Samples of a PCM / float WAV's data chunk (the fixture files are plain RIFF).
function wavFrames(bytes) {
  let off = 12;
  let channels = 1;
  let bits = 16;
  while (off + 8 <= bytes.length) {
    const id = bytes.toString('ascii', off, off + 4);
    const size = bytes.readUInt32LE(off + 4);
    if (id === 'fmt ') {
      channels = bytes.readUInt16LE(off + 10);
      bits = bytes.readUInt16LE(off + 22);
    }
    if (id === 'data') return size / (channels * bits / 8);
    off += 8 + size + (size % 2);
  }
  throw new Error('no data chunk');
}
const softTokens = (samples) => Math.ceil(samples / SAMPLES_PER_TOKEN);
const inputAudio = (name, format = 'wav') => ({
  type: 'input_audio', input_audio: { data: wav(name).toString('base64'), format },
});
const audioUrl = (name) => ({
  type: 'audio_url', audio_url: { url: `data:audio/wav;base64,${wav(name).toString('base64')}` },
});
const text = (t) => ({ type: 'text', text: t });
const ask = (...parts) => [{ role: 'user', content: [text('Listen:'), ...parts, text('What is it?')] }];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function tokenizeCount(messages) {
  const r = await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages }),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body.count;
}

// The streamed text and the whole response agree, and usage counts the soft tokens.
async function sameBothWays(messages) {
  const body = { model: MODEL, messages, max_tokens: 8, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const chunks = await collect(await client.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  }));
  const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(streamed, whole.choices[0].message.content);
  assert.equal(chunks[chunks.length - 1].usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(await tokenizeCount(messages), whole.usage.prompt_tokens, '/tokenize agrees');
  return whole;
}

async function expectError(messages, message) {
  let err;
  try {
    await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4 });
  } catch (e) {
    err = e;
  }
  assert.ok(err, 'the request succeeded');
  assert.equal(err.status, 400, String(err));
  assert.equal(err.error?.message ?? err.message, message);
  assert.equal(err.error?.param, 'messages');
  const ok = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'still there?' }], max_tokens: 2,
  });
  assert.equal(ok.choices.length, 1);
}

const tests = {
  async inputAudioCountsItsFrames() {
    const speech = await sameBothWays(ask(inputAudio('speech_16k_mono_s16.wav')));
    const blip = await sameBothWays(ask(inputAudio('blip_16k_mono_s16.wav')));
    // <|audio> + N x <|audio|> + <audio|> replace the template's one <|audio|>.
    assert.equal(speech.usage.prompt_tokens - blip.usage.prompt_tokens,
      softTokens(wavFrames(wav('speech_16k_mono_s16.wav'))) -
      softTokens(wavFrames(wav('blip_16k_mono_s16.wav'))));
    const textOnly = await tokenizeCount([{ role: 'user', content: [text('Listen:'), text('What is it?')] }]);
    assert.ok(blip.usage.prompt_tokens >= textOnly + softTokens(1234) + 2);
  },
  async audioUrlEqualsInputAudio() {
    const a = await sameBothWays(ask(inputAudio('stereo_16k_s16.wav')));
    const b = await sameBothWays(ask(audioUrl('stereo_16k_s16.wav')));
    assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  },
  async otherRatesAreResampled() {
    // 22.05 kHz -> 16 kHz: ceil(n * 16000 / 22050) samples.
    const n = wavFrames(wav('tone_22k05_mono_s16.wav'));
    const tone = await sameBothWays(ask(inputAudio('tone_22k05_mono_s16.wav')));
    const blip = await tokenizeCount(ask(inputAudio('blip_16k_mono_s16.wav')));
    assert.equal(tone.usage.prompt_tokens - blip,
      softTokens(Math.ceil(n * 16000 / 22050)) - softTokens(1234));
  },
  async audioAndImageTogether() {
    const png = readFileSync(`${imageDir}/rgb_72x56.png`).toString('base64');
    const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } };
    const both = await sameBothWays(ask(image, inputAudio('blip_16k_mono_s16.wav')));
    const audioOnly = await tokenizeCount(ask(inputAudio('blip_16k_mono_s16.wav')));
    assert.ok(both.usage.prompt_tokens > audioOnly + 2, 'the image adds its soft tokens');
  },
  async errors() {
    await expectError(ask({ type: 'input_audio', input_audio: { data: 'AAAA' } }),
      'input_audio content parts need input_audio.data and input_audio.format (strings)');
    await expectError(ask({ type: 'audio_url', audio_url: {} }),
      'audio_url content parts need audio_url.url (a string)');
    await expectError(ask({
      type: 'input_audio', input_audio: { data: Buffer.from('not audio at all').toString('base64'), format: 'wav' },
    }), 'unsupported or invalid audio data (libsndfile: Format not recognised.)');
    const cut = wav('speech_16k_mono_s16.wav').subarray(0, 20044);
    await expectError(ask({ type: 'input_audio', input_audio: { data: cut.toString('base64'), format: 'wav' } }),
      'truncated or corrupt WAV PCM_16 audio: the header promises 27200 frames but only 10000 ' +
      'could be decoded');
    const png = readFileSync(`${imageDir}/rgb_72x56.png`).toString('base64');
    await expectError(ask({ type: 'audio_url', audio_url: { url: `data:image/png;base64,${png}` } }),
      "Invalid audio data URL: media type 'image/png' is not an audio type (expected " +
      'data:audio/...;base64,...).');
    await expectError(ask(inputAudio('blip_16k_mono_s16.wav'), inputAudio('blip_16k_mono_s16.wav'),
      inputAudio('blip_16k_mono_s16.wav')),
      'At most 2 audio(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to increase ' +
      'this limit.');
  },
};

let failures = 0;
for (const [name, fn] of Object.entries(tests)) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   audio.${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures += 1;
    console.log(`FAIL audio.${name}: ${e.stack ?? e}`);
  }
}
process.exit(failures ? 1 : 0);
