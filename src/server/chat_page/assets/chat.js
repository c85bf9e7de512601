// gemmaserve's chat page: plain browser JavaScript, no dependencies, served from the binary.
// Talks to the server's OpenAI API: GET /v1/models, POST /v1/chat/completions with stream:true.
"use strict";

const KEY_STORAGE = "gemmaserve.apiKey";
const MODEL_STORAGE = "gemmaserve.model";
const SETTING_PREFIX = "gemmaserve.setting.";
const EXAMPLE_TOOLS = [
  {
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
  },
];
// The largest video the page attaches. It goes base64 (a third larger) in every request of the
// chat, and the server takes request bodies up to --max-request-size-mb (64 MB by default).
const VIDEO_MAX_BYTES = 20 * 1000 * 1000;

const $ = (id) => document.getElementById(id);
const chat = {
  messages: [], // the OpenAI history sent with each request
  controller: null, // AbortController of the request in flight
  pendingToolCalls: new Map(), // tool_call_id -> true while its result is not given
  images: [], // data: URLs attached to the next message
  audios: [], // {data (base64), format, url} attached to the next message: input_audio parts
  videos: [], // {url (data:), name, chip (its element in the composer)}: video_url parts
  recorder: null, // the MediaRecorder while the microphone records
};

function authHeaders() {
  const headers = { "Content-Type": "application/json" };
  const key = localStorage.getItem(KEY_STORAGE);
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

function setStatus(text) {
  $("status").textContent = text;
}

async function errorMessage(res) {
  const text = await res.text();
  try {
    return JSON.parse(text).error.message;
  } catch {
    return `${res.status} ${res.statusText}${text ? `: ${text}` : ""}`;
  }
}

function askForKey(reason) {
  $("key-reason").textContent = reason;
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  if (!$("key-dialog").open) $("key-dialog").showModal();
}

async function loadModels() {
  let res;
  try {
    res = await fetch("/v1/models", { headers: authHeaders() });
  } catch (e) {
    setStatus(`Cannot reach the server: ${e.message}`);
    return;
  }
  if (res.status === 401) {
    setStatus("API key needed");
    askForKey(
      localStorage.getItem(KEY_STORAGE)
        ? "The server refused the saved API key."
        : "This server was started with --api-key.",
    );
    return;
  }
  if (!res.ok) {
    setStatus(await errorMessage(res));
    return;
  }
  const { data } = await res.json();
  const select = $("model");
  select.replaceChildren(
    ...data.map((m) => {
      const option = document.createElement("option");
      option.value = m.id;
      option.textContent = m.max_model_len ? `${m.id} (${m.max_model_len} ctx)` : m.id;
      return option;
    }),
  );
  const saved = localStorage.getItem(MODEL_STORAGE);
  if (saved && data.some((m) => m.id === saved)) select.value = saved;
  setStatus(data.length ? "Ready" : "The server lists no model");
  $("send").disabled = data.length === 0;
}

// Settings marked data-persist keep their values across visits.
function persistSettings() {
  for (const input of document.querySelectorAll("[data-persist]")) {
    const key = SETTING_PREFIX + input.id;
    const saved = localStorage.getItem(key);
    if (saved !== null) {
      if (input.type === "checkbox") input.checked = saved === "true";
      else input.value = saved;
    }
    input.addEventListener("change", () => {
      localStorage.setItem(key, input.type === "checkbox" ? String(input.checked) : input.value);
    });
  }
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function scrollToEnd() {
  const view = $("conversation");
  view.scrollTop = view.scrollHeight;
}

function addBubble(role, label) {
  $("conversation").querySelector(".empty")?.remove();
  const bubble = element("article", `message ${role}`);
  bubble.append(element("div", "role", label));
  $("conversation").append(bubble);
  scrollToEnd();
  return bubble;
}

function addTextBubble(role, label, text) {
  const bubble = addBubble(role, label);
  bubble.append(element("div", "content", text));
  return bubble;
}

// One streamed assistant turn: thinking (folded), content, tool calls, and a footer line.
class AssistantView {
  constructor(model) {
    this.bubble = addBubble("assistant", model);
    this.bubble.dataset.state = "streaming";
    this.bubble.dataset.chunks = "0";
    this.thinking = element("details", "thinking");
    this.thinking.hidden = true;
    this.thinkingSummary = element("summary", "", "Thinking…");
    this.thinkingText = element("div", "thinking-text");
    this.thinking.append(this.thinkingSummary, this.thinkingText);
    this.content = element("div", "content");
    this.tools = element("div", "tool-calls");
    this.meta = element("div", "meta", "…");
    this.bubble.append(this.thinking, this.content, this.tools, this.meta);
    this.reasoning = "";
    this.text = "";
    this.toolCalls = []; // OpenAI tool_calls, assembled from the deltas by index
    this.toolViews = [];
  }

  apply(delta) {
    // gemmaserve and current vLLM say reasoning; older vLLM servers said reasoning_content.
    const reasoning = delta.reasoning ?? delta.reasoning_content;
    if (reasoning) {
      this.reasoning += reasoning;
      this.thinking.hidden = false;
      this.thinkingText.textContent = this.reasoning;
    }
    if (delta.content) {
      this.text += delta.content;
      this.content.textContent = this.text;
    }
    for (const t of delta.tool_calls || []) {
      const call = (this.toolCalls[t.index] ??= {
        id: "",
        type: "function",
        function: { name: "", arguments: "" },
      });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.function.name += t.function.name;
      if (t.function?.arguments) call.function.arguments += t.function.arguments;
      this.renderToolCall(t.index);
    }
    this.bubble.dataset.chunks = String(Number(this.bubble.dataset.chunks) + 1);
    scrollToEnd();
  }

  renderToolCall(index) {
    const call = this.toolCalls[index];
    let view = this.toolViews[index];
    if (!view) {
      view = { card: element("div", "tool-call") };
      view.name = element("div", "tool-name");
      view.args = element("pre", "tool-args");
      view.card.append(view.name, view.args);
      this.tools.append(view.card);
      this.toolViews[index] = view;
    }
    view.name.textContent = `Tool call: ${call.function.name}`;
    let args = call.function.arguments;
    try {
      args = JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      // still streaming, or not JSON: show it as it is
    }
    view.args.textContent = args;
  }

  // A form under each call to answer it with the tool's result; all answered continues the chat.
  offerToolResults() {
    this.toolCalls.forEach((call, index) => {
      chat.pendingToolCalls.set(call.id, true);
      const form = element("form", "tool-result");
      const input = element("input");
      input.placeholder = `Result of ${call.function.name} (e.g. JSON)`;
      input.setAttribute("aria-label", `Result of ${call.function.name}`);
      const button = element("button", "", "Send result");
      button.type = "submit";
      form.append(input, button);
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        if (!chat.pendingToolCalls.has(call.id) || chat.controller) return;
        chat.pendingToolCalls.delete(call.id);
        chat.messages.push({ role: "tool", tool_call_id: call.id, content: input.value });
        form.replaceWith(element("div", "tool-output", `Result: ${input.value}`));
        if (chat.pendingToolCalls.size === 0) generate();
      });
      this.toolViews[index].card.append(form);
    });
  }

  finish(state, note) {
    this.bubble.dataset.state = state;
    this.thinkingSummary.textContent = "Thinking";
    this.meta.textContent = note;
    if (state === "error") this.bubble.classList.add("error");
  }

  // What goes back into the history: the visible answer and its calls, without the thinking.
  historyMessage() {
    const message = { role: "assistant", content: this.text };
    if (this.toolCalls.length) message.tool_calls = this.toolCalls.filter(Boolean);
    return message;
  }
}

// Yields the data of each server-sent event (one JSON chunk, or "[DONE]").
async function* serverSentEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length) yield data.join("\n");
        data = [];
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
  if (data.length) yield data.join("\n");
}

function requestBody(model) {
  const messages = [];
  const system = $("system-prompt").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...chat.messages);
  const body = {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: $("enable-thinking").checked },
  };
  const temperature = Number.parseFloat($("temperature").value);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  const maxTokens = Number.parseInt($("max-tokens").value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  const tools = $("tools").value.trim();
  if (tools) {
    try {
      body.tools = JSON.parse(tools);
    } catch (e) {
      throw new Error(`Tools is not valid JSON: ${e.message}`);
    }
  }
  return body;
}

function setBusy(busy) {
  $("send").hidden = busy;
  for (const button of document.querySelectorAll("#examples .example")) button.disabled = busy;
  $("stop").hidden = !busy;
  $("prompt").disabled = busy;
  $("model").disabled = busy;
  setStatus(busy ? "Generating…" : "Ready");
}

// A user message whose request failed (a 400 for a corrupt clip, a 401, a 413, ...) leaves the
// history, so the next request goes without it; its bubble stays, marked, and its text comes back
// to the composer to send again.
function dropTurn(turn) {
  const at = chat.messages.lastIndexOf(turn.message);
  if (at >= 0) chat.messages.splice(at, 1); // else a new chat has begun since
  turn.bubble.dataset.state = "dropped";
  turn.bubble.append(element("div", "meta", "Left out of the conversation: the request failed"));
  if (!$("prompt").value) $("prompt").value = turn.text;
}

// Streams the answer to the history; `turn` ({message, bubble, text}) is the user message just
// sent, if that is what asks.
async function generate(turn = null) {
  const model = $("model").value;
  let body;
  try {
    body = requestBody(model);
  } catch (e) {
    setStatus(e.message);
    return;
  }
  const view = new AssistantView(model);
  const controller = new AbortController();
  chat.controller = controller;
  setBusy(true);
  const started = performance.now();
  let finishReason = null;
  let usage = null;
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: authHeaders(),
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) {
      const message = await errorMessage(res);
      if (res.status === 401) askForKey("The server refused the API key.");
      view.finish("error", `Error: ${message}`);
      if (turn) dropTurn(turn);
      return;
    }
    let yielded = performance.now();
    for await (const data of serverSentEvents(res.body)) {
      if (data === "[DONE]") break;
      // Chunks already received resolve as microtasks, which never let the page paint or take a
      // click (Stop): a fast stream froze the page. Give the event loop a turn every 16 ms.
      if (performance.now() - yielded > 16) {
        await new Promise((resolve) => setTimeout(resolve, 0));
        yielded = performance.now();
      }
      // Stop ends the turn now, not after the chunks already received.
      controller.signal.throwIfAborted();
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        if (choice.delta) view.apply(choice.delta);
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    }
    const seconds = (performance.now() - started) / 1000;
    const parts = [`finish_reason: ${finishReason ?? "none"}`];
    if (usage) {
      parts.push(`${usage.completion_tokens} tokens`);
      parts.push(`${(usage.completion_tokens / seconds).toFixed(1)} tokens/s`);
    }
    view.finish("done", parts.join(" · "));
    chat.messages.push(view.historyMessage());
    if (view.toolCalls.length) view.offerToolResults();
  } catch (e) {
    if (e.name === "AbortError") {
      view.finish("stopped", "Stopped");
      chat.messages.push(view.historyMessage());
    } else {
      view.finish("error", `Error: ${e.message}`);
    }
  } finally {
    chat.controller = null;
    setBusy(false);
    $("prompt").focus();
  }
}

function readAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// Images and audio as counts, each video as its chip.
function showAttached() {
  const counts = [];
  if (chat.images.length) counts.push(`${chat.images.length} image(s)`);
  if (chat.audios.length) counts.push(`${chat.audios.length} audio clip(s)`);
  const shown = chat.videos.map((video) => video.chip);
  if (counts.length) shown.unshift(counts.join(", "));
  $("attached").replaceChildren(...shown);
}

// Reads the chosen files as data: URLs for the next message.
async function attachImages(files) {
  for (const file of files) chat.images.push(await readAsDataURL(file));
  showAttached();
}

function fileExtension(file) {
  return /\.([a-z0-9]+)$/i.exec(file.name)?.[1].toLowerCase();
}

// input_audio's format for a file: its extension, else its MIME type. Only a name: the server
// recognises WAV, FLAC, MP3, OGG Vorbis and Opus by their bytes.
function audioFormat(file) {
  const byExtension = { wav: "wav", wave: "wav", flac: "flac", mp3: "mp3", ogg: "ogg", oga: "ogg", opus: "opus" };
  const extension = fileExtension(file);
  if (extension in byExtension) return byExtension[extension];
  const byType = { "audio/mpeg": "mp3", "audio/x-wav": "wav", "audio/wave": "wav", "audio/x-flac": "flac" };
  return byType[file.type] ?? (file.type.startsWith("audio/") ? file.type.slice(6) : "wav");
}

function attachAudio(data, format) {
  chat.audios.push({ data, format, url: `data:audio/${format === "mp3" ? "mpeg" : format};base64,${data}` });
  showAttached();
}

async function attachAudioFiles(files) {
  for (const file of files) {
    const url = await readAsDataURL(file);
    attachAudio(url.slice(url.indexOf(",") + 1), audioFormat(file));
  }
}

// Rounded up: a file over a limit never reads as the limit.
function fileSize(bytes) {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1000 * 1000) return `${Math.ceil(bytes / 1000)} KB`;
  return `${Math.ceil(bytes / 100000) / 10} MB`;
}

// m:ss
function clockTime(seconds) {
  const s = Math.round(seconds);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

// The media type of a video's data: URL. The server refuses a video_url data: URL of another kind
// (browsers give .mkv files no type or application/octet-stream) and reads the format from the
// bytes, so the extension's type does when the browser's is not a video's.
function videoType(file) {
  if (/^video\/|^image\/(gif|webp)$/.test(file.type)) return file.type;
  const byExtension = {
    mp4: "video/mp4",
    m4v: "video/mp4",
    mov: "video/quicktime",
    webm: "video/webm",
    mkv: "video/x-matroska",
    gif: "image/gif",
    webp: "image/webp",
  };
  return byExtension[fileExtension(file)] ?? "video/mp4";
}

// A video's chip in the composer: a preview (the first frame, or the GIF), the file name, its
// duration once the browser has read it (when it can: not a GIF's), its size, and × to remove it.
function videoChip(video, bytes) {
  const chip = element("span", "chip");
  chip.title = video.name;
  const preview = element(video.url.startsWith("data:image/") ? "img" : "video", "chip-preview");
  if (preview.tagName === "IMG") preview.alt = "";
  else preview.preload = "metadata";
  preview.addEventListener("error", () => (preview.hidden = true));
  const detail = element("span", "chip-detail", fileSize(bytes));
  preview.addEventListener("loadedmetadata", () => {
    // A MediaRecorder WebM has no duration in its header: Infinity.
    if (Number.isFinite(preview.duration)) {
      detail.textContent = `${clockTime(preview.duration)} · ${detail.textContent}`;
    }
  });
  preview.src = video.url;
  const remove = element("button", "chip-remove", "×");
  remove.type = "button";
  remove.title = `Remove ${video.name}`;
  remove.setAttribute("aria-label", `Remove ${video.name}`);
  remove.addEventListener("click", () => {
    chat.videos.splice(chat.videos.indexOf(video), 1);
    showAttached();
  });
  chip.append(preview, element("span", "chip-name", video.name), detail, remove);
  return chip;
}

// Reads the chosen clips as data: URLs for the next message; a file over VIDEO_MAX_BYTES is
// refused, saying so in the status line.
async function attachVideoFiles(files) {
  for (const file of files) {
    if (file.size > VIDEO_MAX_BYTES) {
      const limit = fileSize(VIDEO_MAX_BYTES);
      setStatus(`Not attached: ${file.name} is ${fileSize(file.size)}; the page sends videos of up to ${limit}`);
      continue;
    }
    const url = await readAsDataURL(file);
    const video = { url: `data:${videoType(file)};base64,${url.slice(url.indexOf(",") + 1)}`, name: file.name };
    video.chip = videoChip(video, file.size);
    chat.videos.push(video);
  }
  showAttached();
}

function base64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

// 16-bit PCM WAV of an AudioBuffer, its channels averaged (the server would average them too).
function encodeWav(buffer) {
  const frames = buffer.length;
  const mono = new Float32Array(frames);
  for (let c = 0; c < buffer.numberOfChannels; c++) {
    const channel = buffer.getChannelData(c);
    for (let i = 0; i < frames; i++) mono[i] += channel[i] / buffer.numberOfChannels;
  }
  const view = new DataView(new ArrayBuffer(44 + frames * 2));
  const ascii = (at, text) => [...text].forEach((ch, i) => view.setUint8(at + i, ch.charCodeAt(0)));
  ascii(0, "RIFF");
  view.setUint32(4, 36 + frames * 2, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // the fmt chunk's size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // one channel
  view.setUint32(24, buffer.sampleRate, true);
  view.setUint32(28, buffer.sampleRate * 2, true); // bytes per second
  view.setUint16(32, 2, true); // bytes per frame
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, frames * 2, true);
  for (let i = 0; i < frames; i++) {
    // The decoder reads 16-bit PCM as v / 32768: the inverse, clamped.
    view.setInt16(44 + i * 2, Math.max(-32768, Math.min(32767, Math.round(mono[i] * 32768))), true);
  }
  return new Uint8Array(view.buffer);
}

function canRecord() {
  return Boolean(navigator.mediaDevices?.getUserMedia) && typeof MediaRecorder !== "undefined";
}

// The microphone through MediaRecorder, which gives WebM or Ogg (Opus) that the server does not
// decode: the page decodes the recording with Web Audio and attaches it as WAV. A second click
// stops it.
async function toggleRecording() {
  if (chat.recorder) {
    chat.recorder.stop();
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (e) {
    setStatus(`Cannot record: ${e.message || e.name}`);
    return;
  }
  const recorder = new MediaRecorder(stream);
  const chunks = [];
  recorder.addEventListener("dataavailable", (event) => {
    if (event.data.size) chunks.push(event.data);
  });
  recorder.addEventListener("stop", async () => {
    for (const track of stream.getTracks()) track.stop();
    chat.recorder = null;
    $("record").textContent = "Record";
    $("record").classList.remove("recording");
    const context = new AudioContext();
    try {
      const recorded = new Blob(chunks, { type: recorder.mimeType });
      const buffer = await context.decodeAudioData(await recorded.arrayBuffer());
      attachAudio(base64(encodeWav(buffer)), "wav");
      setStatus("Ready");
    } catch (e) {
      setStatus(`Cannot use the recording: ${e.message || e.name}`);
    } finally {
      context.close();
    }
  });
  chat.recorder = recorder;
  recorder.start();
  $("record").textContent = "Stop recording";
  $("record").classList.add("recording");
  setStatus("Recording…");
}

function send() {
  const text = $("prompt").value.trim();
  if (!text || chat.controller || !$("model").value) return;
  $("prompt").value = "";
  chat.pendingToolCalls.clear();
  const media = [
    ...chat.images.map((url) => ({ type: "image_url", image_url: { url } })),
    ...chat.audios.map(({ data, format }) => ({ type: "input_audio", input_audio: { data, format } })),
    ...chat.videos.map(({ url }) => ({ type: "video_url", video_url: { url } })),
  ];
  const message = { role: "user", content: media.length ? [...media, { type: "text", text }] : text };
  chat.messages.push(message);
  const bubble = addTextBubble("user", "You", text);
  for (const url of chat.images) {
    const img = element("img", "thumb");
    img.src = url;
    img.alt = "attached image";
    bubble.append(img);
  }
  for (const clip of chat.audios) {
    const audio = element("audio", "clip");
    audio.controls = true;
    audio.src = clip.url;
    bubble.append(audio);
  }
  for (const { url, name } of chat.videos) {
    // A GIF or WebP shows as an image; a clip the browser cannot play, only as its name.
    const shown = url.startsWith("data:image/") ? element("img", "thumb") : element("video", "clip");
    shown.addEventListener("error", () => (shown.hidden = true));
    shown.src = url;
    shown.title = name;
    if (shown.tagName === "IMG") {
      shown.alt = name;
    } else {
      shown.controls = true;
      shown.preload = "metadata";
    }
    bubble.append(shown, element("div", "media-name", name));
  }
  chat.images = [];
  chat.audios = [];
  chat.videos = [];
  showAttached();
  generate({ message, bubble, text });
}

// An example starts a new chat (the demo model answers single questions), sets what it needs
// (thinking on or off, the get_weather tool) and sends its question. Tools the user wrote stay;
// only the example tool is taken out again by an example without it.
function sendExample(button) {
  if (chat.controller || !$("model").value) return;
  newChat();
  const thinking = $("enable-thinking");
  if (thinking.checked !== (button.dataset.thinking === "true")) {
    thinking.checked = !thinking.checked;
    thinking.dispatchEvent(new Event("change"));
  }
  const exampleTools = JSON.stringify(EXAMPLE_TOOLS, null, 2);
  const tools = $("tools").value.trim();
  const wanted = button.dataset.tools === "get_weather" ? exampleTools : tools === exampleTools ? "" : tools;
  if (wanted !== tools) {
    $("tools").value = wanted;
    $("tools").dispatchEvent(new Event("change"));
  }
  $("prompt").value = button.dataset.prompt;
  send();
}

function newChat() {
  chat.controller?.abort();
  chat.messages = [];
  chat.images = [];
  chat.audios = [];
  chat.videos = [];
  showAttached();
  chat.pendingToolCalls.clear();
  const empty = element("p", "empty", "New conversation.");
  $("conversation").replaceChildren(empty);
}

function init() {
  persistSettings();
  $("send").disabled = true;
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", () => chat.controller?.abort());
  $("attach").addEventListener("click", () => $("image-file").click());
  $("image-file").addEventListener("change", async () => {
    await attachImages($("image-file").files);
    $("image-file").value = "";
  });
  $("attach-audio").addEventListener("click", () => $("audio-file").click());
  $("audio-file").addEventListener("change", async () => {
    await attachAudioFiles($("audio-file").files);
    $("audio-file").value = "";
  });
  $("attach-video").addEventListener("click", () => $("video-file").click());
  $("video-file").addEventListener("change", async () => {
    await attachVideoFiles($("video-file").files);
    $("video-file").value = "";
  });
  if (canRecord()) {
    $("record").addEventListener("click", toggleRecording);
  } else {
    $("record").disabled = true;
    $("record").title = "Recording needs MediaRecorder and a secure page (https or localhost)";
  }
  $("new-chat").addEventListener("click", newChat);
  $("model").addEventListener("change", () => localStorage.setItem(MODEL_STORAGE, $("model").value));
  for (const button of document.querySelectorAll("#examples .example")) {
    button.addEventListener("click", () => sendExample(button));
  }
  $("tools-example").addEventListener("click", () => {
    $("tools").value = JSON.stringify(EXAMPLE_TOOLS, null, 2);
    $("tools").dispatchEvent(new Event("change"));
  });
  $("change-key").addEventListener("click", () => askForKey("Set the key this page sends."));
  $("key-cancel").addEventListener("click", () => $("key-dialog").close());
  $("key-form").addEventListener("submit", () => {
    const key = $("api-key").value.trim();
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
    loadModels();
  });
  loadModels();
}

init();
