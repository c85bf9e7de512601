// Speech-to-text through `gemmaserve serve` with the official openai SDK (issue 37):
// audio.transcriptions.create and audio.translations.create, whole and streamed, in every
// response format; a 3-minute file heard in 30-second pieces (the pieces transcribed alone give
// the same text); a chat message with a 70-second clip; and the 400s (corrupt, over-long and
// over-size files, bad fields) with the server still serving after each.
// usage: node speech_openai.mjs BASE_URL AUDIO_DIR
// The server runs the tiny-unified preset with --max-audio-seconds 190 and
// VLLM_MAX_AUDIO_CLIP_FILESIZE_MB=7.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI, { toFile } from 'openai';

const base = process.argv[2];
const audioDir = process.argv[3];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';
const RATE = 16000;

// A 16 kHz mono PCM16 WAV of `seconds` of a tone whose loudness swells and fades.
function toneWav(seconds, hz = 220) {
  const n = Math.round(seconds * RATE);
  const data = Buffer.alloc(n * 2);
  for (let i = 0; i < n; ++i) {
    const t = i / RATE;
    const v = 0.3 * Math.sin(2 * Math.PI * hz * t) * (0.5 + 0.5 * Math.sin(2 * Math.PI * 0.3 * t));
    data.writeInt16LE(Math.round(v * 32767), i * 2);
  }
  return wavOf(data);
}

function wavOf(pcm16) {
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + pcm16.length, 4);
  header.write('WAVEfmt ', 8, 'ascii');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);  // PCM
  header.writeUInt16LE(1, 22);  // mono
  header.writeUInt32LE(RATE, 24);
  header.writeUInt32LE(RATE * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(pcm16.length, 40);
  return Buffer.concat([header, pcm16]);
}

// Samples [begin, end) of a WAV made by wavOf, as a WAV of their own.
const sliceWav = (wav, begin, end) => wavOf(wav.subarray(44 + begin * 2, 44 + end * 2));
const file = (bytes, name = 'clip.wav') => toFile(bytes, name, { type: 'audio/wav' });

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function expectError(promise, status, message, param) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected a ${status}`);
  assert.equal(err.status, status, err.message);
  assert.equal(err.error?.message, message);
  if (param !== undefined) assert.equal(err.error?.param, param);
  await stillServing();
}

const speech = readFileSync(`${audioDir}/speech_16k_mono_s16.wav`);
let reference = null;
async function stillServing() {
  const r = await client.audio.transcriptions.create({
    file: await file(speech), model: MODEL, max_completion_tokens: 6,
  });
  if (reference === null) reference = r.text;
  assert.equal(r.text, reference, 'the server answers as before');
}

const opts = { model: MODEL, max_completion_tokens: 6 };

// json, text, streamed: one answer; usage in seconds of audio.
const whole = await client.audio.transcriptions.create({ file: await file(speech), ...opts });
assert.equal(typeof whole.text, 'string');
assert.ok(whole.text.length > 0);
assert.deepEqual(whole.usage, { type: 'duration', seconds: 2 });  // 1.7 s, rounded up
const text = await client.audio.transcriptions.create({
  file: await file(speech), ...opts, response_format: 'text',
});
assert.equal(text, `${whole.text}\n`);
const chunks = await collect(await client.audio.transcriptions.create({
  file: await file(speech), ...opts, stream: true, stream_include_usage: true,
}));
assert.match(chunks[0].id, /^transcribe-[0-9a-f]{32}$/);
for (const c of chunks) assert.equal(c.object, 'transcription.chunk');
const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
assert.equal(streamed, whole.text);
const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
assert.equal(finishes.length, 1);
assert.equal(finishes[0].choices[0].finish_reason, 'length');
const usage = chunks[chunks.length - 1].usage;
assert.equal(usage.completion_tokens, 6);
assert.equal(usage.total_tokens, usage.prompt_tokens + 6);

// A 3-minute file: seven pieces of at most 30 s, cut at quiet points, joined by spaces; each
// piece sent alone gives its part of the text.
const long = toneWav(180);
const verbose = await client.audio.transcriptions.create({
  file: await file(long), ...opts, max_completion_tokens: 3, response_format: 'verbose_json',
  timestamp_granularities: ['segment'],
});
assert.equal(verbose.duration, '180.0');
assert.equal(verbose.words, null);
const segs = verbose.segments;
assert.equal(segs.length, 7);
assert.equal(segs[0].start, 0);
assert.equal(segs[segs.length - 1].end, 180);
for (let i = 0; i < segs.length; ++i) {
  assert.ok(segs[i].end - segs[i].start <= 30, `segment ${i} is at most 30 s`);
  assert.ok(segs[i].end - segs[i].start > 1 || i === segs.length - 1);
  if (i > 0) assert.equal(segs[i].start, segs[i - 1].end, 'pieces are contiguous');
  assert.equal(segs[i].id, i);
  assert.equal(segs[i].tokens.length, 3);
  assert.ok(segs[i].avg_logprob <= 0);
}
assert.equal(verbose.text, segs.map((s) => s.text).join(''));
const alone = [];
for (const s of segs) {
  const piece = sliceWav(long, Math.round(s.start * RATE), Math.round(s.end * RATE));
  alone.push((await client.audio.transcriptions.create({
    file: await file(piece), ...opts, max_completion_tokens: 3,
  })).text);
}
assert.equal(verbose.text, alone.join(' '), 'the pieces heard alone give the same text');
const longJson = await client.audio.transcriptions.create({
  file: await file(long), ...opts, max_completion_tokens: 3,
});
assert.equal(longJson.text, verbose.text);
assert.deepEqual(longJson.usage, { type: 'duration', seconds: 180 });
const longStream = await collect(await client.audio.transcriptions.create({
  file: await file(long), ...opts, max_completion_tokens: 3, stream: true,
}));
assert.equal(longStream.map((c) => c.choices[0]?.delta?.content ?? '').join(''), verbose.text);
assert.equal(longStream.filter((c) => c.choices[0]?.finish_reason).length, 7, 'one end per piece');

// Subtitles: one cue per piece.
const srt = await client.audio.transcriptions.create({
  file: await file(long), ...opts, max_completion_tokens: 3, response_format: 'srt',
});
assert.match(srt, /^1\n00:00:00,000 --> 00:00:[0-9]{2},[0-9]{3}\n/);
assert.equal(srt.split('\n\n').length, 7);
assert.match(srt, /\n7\n00:02:[0-9]{2},[0-9]{3} --> 00:03:00,000\n/);
const vtt = await client.audio.transcriptions.create({
  file: await file(speech), ...opts, response_format: 'vtt',
});
assert.equal(vtt, `WEBVTT\n\n00:00:00.000 --> 00:00:01.700\n${whole.text.trim()}\n`);

// Translations: {text} without usage; streamed as translation.chunk.
const translated = await client.audio.translations.create({ file: await file(speech), ...opts });
assert.deepEqual(Object.keys(translated), ['text']);
// The SDK's translations.create has no stream mode: the events are read off the wire.
const tform = new FormData();
tform.append('file', new Blob([speech], { type: 'audio/wav' }), 'speech.wav');
tform.append('max_completion_tokens', '6');
tform.append('stream', 'true');
const tresp = await fetch(`${base}/v1/audio/translations`, { method: 'POST', body: tform });
assert.equal(tresp.status, 200);
assert.match(tresp.headers.get('content-type'), /^text\/event-stream/);
const tevents = (await tresp.text()).split('\n\n').filter((e) => e.startsWith('data: '));
assert.equal(tevents[tevents.length - 1], 'data: [DONE]');
const tchunks = tevents.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
assert.match(tchunks[0].id, /^translate-[0-9a-f]{32}$/);
assert.equal(tchunks[0].object, 'translation.chunk');
assert.equal(tchunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), translated.text);

// A 70-second clip in a chat message is heard in three pieces, each its own span.
const clip70 = toneWav(70);
const messages = [{
  role: 'user',
  content: [{ type: 'input_audio', input_audio: { data: clip70.toString('base64'), format: 'wav' } },
    { type: 'text', text: 'What is this?' }],
}];
const tok = await (await fetch(`${base}/tokenize`, {
  method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ model: MODEL, messages }),
})).json();
const AUDIO_TOKEN = 258881;  // <|audio|>, the soft-token placeholder of the real vocabulary
const spans = tok.tokens.filter((t, i) => t === AUDIO_TOKEN && tok.tokens[i - 1] !== AUDIO_TOKEN);
assert.equal(spans.length, 3, 'three <|audio>...<audio|> spans');
const chat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
assert.equal(chat.usage.prompt_tokens, tok.count, '/tokenize counts the three spans');
assert.ok(tok.count > 1750, 'every second of the clip is heard (25 tokens a second)');

// Errors, each a 400 that leaves the server serving.
await expectError(client.audio.transcriptions.create({
  file: await file(Buffer.from('RIFF\x24\x00\x00\x00WAVEnot audio at all')), ...opts,
}), 400, 'Invalid or unsupported audio file: unsupported or invalid audio data (libsndfile: ' +
  "Error in WAV file. No 'data' chunk marker.)", 'file');
await expectError(client.audio.transcriptions.create({
  file: await file(long.subarray(0, 100044)), ...opts,
}), 400, 'Invalid or unsupported audio file: truncated or corrupt WAV PCM_16 audio: the header ' +
  'promises 2880000 frames but only 50000 could be decoded', 'file');
await expectError(client.audio.transcriptions.create({ file: await file(toneWav(200)), ...opts }),
  400, 'audio is 200.0 s long; the limit is 190 s (--max-audio-seconds)', 'file');
await expectError(client.chat.completions.create({
  model: MODEL, max_tokens: 2, messages: [{
    role: 'user',
    content: [{ type: 'input_audio',
      input_audio: { data: toneWav(200).toString('base64'), format: 'wav' } }],
  }],
}), 400, 'audio is 200.0 s long; the limit is 190 s (--max-audio-seconds)', 'messages');
const big = Buffer.alloc(7 * 1024 * 1024 + 1024);
await expectError(client.audio.transcriptions.create({ file: await file(big), ...opts }), 400,
  'Maximum file size exceeded (parameter=audio_filesize_mb, value=7.0009765625)',
  'audio_filesize_mb');
await expectError(client.audio.transcriptions.create({
  file: await file(speech), ...opts, language: 'xx',
}), 400, `Unsupported language: 'xx'.  Must be one of ['af', 'ar', 'hy', 'az', 'be', 'bs', 'bg', ` +
  `'ca', 'zh', 'hr', 'cs', 'da', 'nl', 'en', 'et', 'fi', 'fr', 'gl', 'de', 'el', 'he', 'hi', ` +
  `'hu', 'is', 'id', 'it', 'ja', 'kn', 'kk', 'ko', 'lv', 'lt', 'mk', 'ms', 'mr', 'mi', 'ne', ` +
  `'no', 'fa', 'pl', 'pt', 'ro', 'ru', 'sr', 'sk', 'sl', 'es', 'sw', 'sv', 'tl', 'ta', 'th', ` +
  `'tr', 'uk', 'ur', 'vi', 'cy'].`, 'language');
await expectError(client.audio.transcriptions.create({
  file: await file(speech), ...opts, response_format: 'verbose_json',
  timestamp_granularities: ['word'],
}), 400, 'timestamp_granularities: word timestamps are not available: Gemma 4 gives no word ' +
  'times (segment timestamps are given per piece of the audio)', 'timestamp_granularities');
await expectError(client.audio.transcriptions.create({
  file: await file(speech), ...opts, response_format: 'verbose_json', stream: true,
}), 400, "verbose_json format doesn't support streaming case", 'response_format');
await expectError(client.audio.transcriptions.create({
  file: await file(speech), ...opts, stream_include_usage: true,
}), 400, 'Stream options can only be defined when `stream=True`.', 'stream_include_usage');
await expectError(client.audio.transcriptions.create({
  file: await file(speech), ...opts, response_format: 'xml',
}), 400, "response_format: Input should be 'json', 'text', 'srt', 'verbose_json' or 'vtt'",
'response_format');
await expectError(client.audio.transcriptions.create({ file: await file(speech), model: 'other' }),
  404, 'The model `other` does not exist.', 'model');
const form = new FormData();
form.append('file', 'not a file');
const asText = await fetch(`${base}/v1/audio/transcriptions`, { method: 'POST', body: form });
assert.equal(asText.status, 422);
assert.equal((await asText.json()).error.message,
  "Expected 'file' to be a file-like object, not 'str'.");
await stillServing();
console.log('speech_openai: all checks passed');
