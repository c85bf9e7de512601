// The chat page (GET /) in a real browser: Debian's chromium driven by playwright-core against a
// running `gemmaserve serve --api-key KEY`. Checks, in order:
//  1. the page loads without the key and only from the server (no external fetch), then asks for
//     the key when /v1/models answers 401, refuses a wrong one, and lists the model with the right;
//  2. an answer streams: the assistant text is rendered in several steps, growing, and ends done;
//  3. Stop mid-stream (max_tokens far away): the UI says stopped and the server counts one more
//     vllm:request_success_total{finished_reason="abort"} with nothing left running;
//  4. thinking and tool calls (a canned stream: the random test model makes neither): the thought
//     is folded, the call shown, and its result goes back to the real server, which answers;
//  5. the request carries the settings (temperature, max_tokens, enable_thinking, tools, key);
//  6. an attached image goes as an image_url part;
//  7. an attached WAV file goes as an input_audio part, is shown as an audio element, and the
//     server (a model with audio) answers it;
//  8. a recording from chromium's fake microphone is attached as a WAV the server decodes, and
//     without a microphone Record says so and breaks nothing;
//  9. a video over the page's limit is refused on the page; an attached clip shows as a chip (name,
//     duration, size) that × removes, goes as a video_url data:video/mp4 part, is shown in the
//     history, and the server answers it; a truncated clip gets the server's 400 message, leaves
//     the history, and the chat goes on;
// 10. a click on an example question sends it alone in a new chat, with the thinking and tools it
//     needs.
// Saves two screenshots (FILE.png, FILE_video.png). usage: node chat_page.mjs --base-url URL
//   --model NAME --api-key KEY --chromium PATH --screenshot FILE.png --audio FILE.wav
//   --video CLIP.mp4 --corrupt-video TRUNCATED.mp4
// Prints PASS or FAIL (with the reason) and exits 0 or 1.
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { chromium } from "playwright-core";
import { metricValue } from "./prometheus.mjs";

function parseArgs(argv) {
  const opts = {};
  const names = {
    "--base-url": "baseUrl",
    "--model": "model",
    "--api-key": "apiKey",
    "--chromium": "chromium",
    "--screenshot": "screenshot",
    "--audio": "audio",
    "--video": "video",
    "--corrupt-video": "corruptVideo",
  };
  for (let i = 2; i < argv.length; i += 2) {
    if (!(argv[i] in names) || argv[i + 1] === undefined) throw new Error(`bad flag ${argv[i]}`);
    opts[names[argv[i]]] = argv[i + 1];
  }
  for (const [flag, key] of Object.entries(names)) {
    if (!opts[key]) throw new Error(`${flag} is required`);
  }
  opts.baseUrl = opts.baseUrl.replace(/\/+$/, "");
  return opts;
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function metrics(baseUrl) {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  return {
    running: metricValue(text, "vllm:num_requests_running"),
    aborted: metricValue(text, "vllm:request_success_total", 'finished_reason="abort"') ?? 0,
  };
}

// One server-sent chat.completion.chunk event of a canned stream.
function cannedChunk(model, delta, finish = null) {
  return `data: ${JSON.stringify({
    id: "chatcmpl-canned",
    object: "chat.completion.chunk",
    created: 0,
    model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })}\n\n`;
}

// A Gemma-4-style answer the random model cannot give: a thought, then a get_weather call.
function cannedToolStream(model) {
  const chunk = (delta, finish) => cannedChunk(model, delta, finish);
  return [
    chunk({ role: "assistant", content: "" }),
    chunk({ reasoning: "The user asks about Lyon. " }),
    chunk({ reasoning: "I should call get_weather." }),
    chunk({
      tool_calls: [
        { index: 0, id: "chatcmpl-tool-1", type: "function", function: { name: "get_weather", arguments: "" } },
      ],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city": "Lyon"}' } }] }),
    chunk({}, "tool_calls"),
    "data: [DONE]\n\n",
  ].join("");
}

// A plain streamed answer, for requests whose body is what a check looks at.
function cannedTextStream(model, text) {
  const chunk = (delta, finish) => cannedChunk(model, delta, finish);
  return [chunk({ role: "assistant", content: "" }), chunk({ content: text }), chunk({}, "stop"), "data: [DONE]\n\n"].join(
    "",
  );
}

async function setSettings(page, { maxTokens, temperature }) {
  await page.fill("#max-tokens", String(maxTokens));
  if (temperature !== undefined) await page.fill("#temperature", String(temperature));
}

async function sendMessage(page, text) {
  await page.fill("#prompt", text);
  await page.click("#send");
}

// The n-th assistant turn of the conversation shown.
const assistant = (page, n) => page.locator(".message.assistant").nth(n);

// attach(), then `text` sent to the real server as the chat's turn `turnIndex` (the first by
// default); returns the request body the page sent and the answer's footer once the turn is done
// (a failed turn fails the check).
async function sendWithMedia(page, text, attach, turnIndex = 0) {
  let body = null;
  const onRequest = (r) => {
    if (r.url().endsWith("/v1/chat/completions")) body = r.postDataJSON();
  };
  page.on("request", onRequest);
  try {
    await attach();
    await sendMessage(page, text);
    const turn = assistant(page, turnIndex);
    await turn.and(page.locator('[data-state="done"], [data-state="error"]')).waitFor({ timeout: 60000 });
    const meta = await turn.locator(".meta").textContent();
    check((await turn.getAttribute("data-state")) === "done", `the turn '${text}' failed: ${meta}`);
    return { body, meta };
  } finally {
    page.off("request", onRequest);
  }
}

async function main() {
  const opts = parseArgs(process.argv);
  const browser = await chromium.launch({
    executablePath: opts.chromium,
    headless: true,
    args: [
      // Chromium's sandbox cannot start as root, which is how CI runs.
      ...(process.getuid?.() === 0 ? ["--no-sandbox"] : []),
      // A fake microphone (a beep), allowed without asking: the Record button can be tested.
      "--use-fake-device-for-media-stream",
      "--use-fake-ui-for-media-stream",
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const foreign = [];
    page.on("request", (r) => {
      if (!r.url().startsWith(opts.baseUrl)) foreign.push(r.url());
    });
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));

    // 1. The page needs no key; /v1/models does, so the page asks.
    const response = await page.goto(`${opts.baseUrl}/`);
    check(response.status() === 200, `GET / answered ${response.status()}`);
    await page.locator("#key-dialog").waitFor({ state: "visible", timeout: 10000 });
    await page.fill("#api-key", "wrong-key");
    await page.click("#key-save");
    await page.locator("#key-dialog").waitFor({ state: "visible", timeout: 10000 });
    const reason = await page.textContent("#key-reason");
    check(reason.includes("refused"), `a wrong key should be refused, the dialog says '${reason}'`);
    await page.fill("#api-key", opts.apiKey);
    await page.click("#key-save");
    await page.locator(`#model option[value="${opts.model}"]`).waitFor({ state: "attached", timeout: 10000 });
    await page.selectOption("#model", opts.model);
    check(
      (await page.evaluate(() => localStorage.getItem("gemmaserve.apiKey"))) === opts.apiKey,
      "the key is not kept in localStorage",
    );
    console.log("key prompt: 401 asked, wrong key refused, right key listed the model");

    // 2. A streamed answer: record the text length at every render.
    await setSettings(page, { maxTokens: 48, temperature: 1 });
    await page.evaluate(() => {
      window.renders = [];
      new MutationObserver(() => {
        const content = [...document.querySelectorAll(".message.assistant .content")].pop();
        if (content) window.renders.push(content.textContent.length);
      }).observe(document.getElementById("conversation"), {
        subtree: true,
        childList: true,
        characterData: true,
      });
    });
    await sendMessage(page, "Hello! Who are you?");
    const first = assistant(page, 0);
    await first.and(page.locator('[data-state="done"]')).waitFor({ timeout: 60000 });
    const finalText = await first.locator(".content").textContent();
    const chunks = Number(await first.getAttribute("data-chunks"));
    const lengths = [...new Set(await page.evaluate(() => window.renders))].filter((n) => n > 0);
    const grows = lengths.every((n, i) => i === 0 || n > lengths[i - 1]);
    console.log(
      `streamed: ${chunks} chunks, ${lengths.length} distinct renders, ${finalText.length} chars; ` +
        `footer '${await first.locator(".meta").textContent()}'`,
    );
    check(finalText.length > 0, "the streamed answer is empty");
    check(chunks >= 3, `only ${chunks} chunks were rendered`);
    check(lengths.length >= 2 && grows, `the text did not grow over renders: ${lengths.join(",")}`);

    // 3. Stop mid-stream: far from max_tokens, so the server is still generating.
    const before = await metrics(opts.baseUrl);
    await setSettings(page, { maxTokens: 3000 });
    await sendMessage(page, "Tell me a very long story.");
    const streaming = assistant(page, 1);
    await page.waitForFunction(
      () => {
        const m = [...document.querySelectorAll(".message.assistant")].pop();
        return m.dataset.state === "streaming" && Number(m.dataset.chunks) >= 5;
      },
      null,
      { timeout: 60000 },
    );
    await page.click("#stop");
    await streaming.and(page.locator('[data-state="stopped"]')).waitFor({ timeout: 10000 });
    check((await streaming.locator(".meta").textContent()) === "Stopped", "the footer does not say Stopped");
    check(await page.isVisible("#send"), "Send is not back after Stop");
    let after = await metrics(opts.baseUrl);
    for (let i = 0; i < 100 && (after.running !== 0 || after.aborted <= before.aborted); i++) {
      await sleep(100);
      after = await metrics(opts.baseUrl);
    }
    console.log(
      `stopped after ${await streaming.getAttribute("data-chunks")} chunks; server: ` +
        `running=${after.running}, aborted ${before.aborted} -> ${after.aborted}`,
    );
    check(after.running === 0, `the server still runs ${after.running} request(s) after Stop`);
    check(after.aborted === before.aborted + 1, "the server did not count the stopped request as aborted");

    // 4 and 5. Thinking and a tool call from a canned stream, the request as the page sent it.
    await page.click("#new-chat");
    await setSettings(page, { maxTokens: 16, temperature: 0.5 });
    await page.check("#enable-thinking");
    await page.click("#tools-example");
    let sent = null;
    await page.route("**/v1/chat/completions", async (route) => {
      sent = { body: route.request().postDataJSON(), auth: route.request().headers().authorization };
      await route.fulfill({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: cannedToolStream(opts.model),
      });
    });
    await sendMessage(page, "What's the weather in Lyon?");
    const toolTurn = assistant(page, 0); // New chat cleared the conversation
    await toolTurn.and(page.locator('[data-state="done"]')).waitFor({ timeout: 10000 });
    await page.unroute("**/v1/chat/completions");
    check(sent.auth === `Bearer ${opts.apiKey}`, `Authorization was '${sent.auth}'`);
    check(sent.body.stream === true && sent.body.model === opts.model, "not a streamed request for the model");
    check(sent.body.temperature === 0.5 && sent.body.max_tokens === 16, "temperature/max_tokens not sent");
    check(sent.body.chat_template_kwargs?.enable_thinking === true, "enable_thinking not sent");
    check(sent.body.tools?.[0]?.function?.name === "get_weather", "the tools were not sent");
    const thinking = toolTurn.locator("details.thinking");
    check(await thinking.isVisible(), "the thinking is not shown");
    check(!(await thinking.evaluate((d) => d.open)), "the thinking is not folded");
    const thought = await thinking.locator(".thinking-text").textContent();
    check(thought === "The user asks about Lyon. I should call get_weather.", `thought was '${thought}'`);
    check(
      (await toolTurn.locator(".tool-name").textContent()) === "Tool call: get_weather",
      "the tool call's name is not shown",
    );
    check((await toolTurn.locator(".tool-args").textContent()).includes('"city": "Lyon"'), "arguments not shown");
    check((await toolTurn.locator(".meta").textContent()).includes("tool_calls"), "finish_reason not shown");
    await toolTurn.locator(".tool-result input").fill('{"temperature_c": 18, "sky": "clear"}');
    await toolTurn.locator(".tool-result button").click();
    const answer = assistant(page, 1);
    await answer.and(page.locator('[data-state="done"]')).waitFor({ timeout: 60000 });
    check(
      (await answer.locator(".content").textContent()).length > 0,
      "the real server gave no answer after the tool result",
    );
    console.log(`tool call: shown, result sent, server answered (${await answer.locator(".meta").textContent()})`);

    await thinking.locator("summary").click(); // unfolded for the screenshot
    await page.screenshot({ path: opts.screenshot });
    console.log(`screenshot: ${opts.screenshot}`);

    // 6. An attached image goes as an image_url data: URL part before the text; the real server
    // (the tiny unified model has an image embedder) answers it.
    await page.click("#new-chat");
    await page.uncheck("#enable-thinking");
    await page.fill("#tools", "");
    await setSettings(page, { maxTokens: 8 });
    const png = Buffer.from(
      "iVBORw0KGgoAAAANSUhEUgAAABgAAAAQCAIAAACDRijCAAAAIElEQVR4nGNkYGjgYmCgHLEw8DNQBYwaNGrQqEEj1SAA0KAChbGsTJsAAAAASUVORK5CYII=",
      "base64",
    );
    const imageTurn = await sendWithMedia(page, "What is in this picture?", async () => {
      await page.setInputFiles("#image-file", { name: "grid.png", mimeType: "image/png", buffer: png });
      await page.waitForFunction(() => document.getElementById("attached").textContent === "1 image(s)");
    });
    const parts = imageTurn.body?.messages?.at(-1)?.content;
    check(
      Array.isArray(parts) && parts.length === 2 && parts[0].type === "image_url" &&
        parts[0].image_url.url === `data:image/png;base64,${png.toString("base64")}` &&
        parts[1].type === "text" && parts[1].text === "What is in this picture?",
      `the image was not sent as an image_url part: ${JSON.stringify(parts)?.slice(0, 200)}`,
    );
    check((await page.locator(".message.user img.thumb").count()) === 1, "the image is not shown");
    check((await page.textContent("#attached")) === "", "the attachment was not cleared");
    console.log(`image: sent as a data: URL part, server answered (${imageTurn.meta})`);

    // 7. An attached WAV goes as an input_audio part (its bytes in base64, format "wav") before
    // the text, is shown as an audio element, and the real server decodes and answers it.
    const wav = readFileSync(opts.audio);
    await page.click("#new-chat");
    const audioTurn = await sendWithMedia(page, "What do you hear?", async () => {
      await page.setInputFiles("#audio-file", opts.audio);
      await page.waitForFunction(() => document.getElementById("attached").textContent === "1 audio clip(s)");
    });
    const audioParts = audioTurn.body?.messages?.at(-1)?.content;
    check(
      Array.isArray(audioParts) && audioParts.length === 2 && audioParts[0].type === "input_audio" &&
        audioParts[0].input_audio.data === wav.toString("base64") && audioParts[0].input_audio.format === "wav" &&
        audioParts[1].type === "text" && audioParts[1].text === "What do you hear?",
      `the WAV was not sent as an input_audio part: ${JSON.stringify(audioParts)?.slice(0, 200)}`,
    );
    const shown = page.locator(".message.user audio.clip");
    check((await shown.count()) === 1, "the audio clip is not shown");
    check(
      (await shown.getAttribute("src")) === `data:audio/wav;base64,${wav.toString("base64")}`,
      "the shown clip is not the attached file",
    );
    check((await page.textContent("#attached")) === "", "the audio attachment was not cleared");
    console.log(`audio: ${basename(opts.audio)} sent as input_audio, server answered (${audioTurn.meta})`);

    // 8. Recording (chromium's fake microphone): Record, then Stop recording, attaches a WAV made
    // in the page from MediaRecorder's WebM, which the real server decodes and answers.
    await page.click("#new-chat");
    // Waits until `selector` shows `text` or the status says the recording failed (a check).
    const untilRecording = async (selector, text) => {
      await page.waitForFunction(
        (want) =>
          document.getElementById("status").textContent.startsWith("Cannot") ||
          document.querySelector(want.selector).textContent === want.text,
        { selector, text },
        { timeout: 10000 },
      );
      const status = await page.textContent("#status");
      check(!status.startsWith("Cannot"), `recording failed: ${status}`);
    };
    await page.click("#record");
    await untilRecording("#record", "Stop recording");
    await sleep(1000);
    await page.click("#record");
    await untilRecording("#attached", "1 audio clip(s)");
    check((await page.textContent("#record")) === "Record", "the Record button did not come back");
    const recorded = await sendWithMedia(page, "What did I say?", async () => {});
    const recordedPart = recorded.body?.messages?.at(-1)?.content?.[0];
    const recordedWav = Buffer.from(recordedPart?.input_audio?.data ?? "", "base64");
    check(
      recordedPart?.type === "input_audio" && recordedPart.input_audio.format === "wav" &&
        recordedWav.subarray(0, 4).toString() === "RIFF" && recordedWav.subarray(8, 12).toString() === "WAVE",
      `the recording was not sent as a WAV input_audio part: ${JSON.stringify(recordedPart)?.slice(0, 120)}`,
    );
    const rate = recordedWav.readUInt32LE(24);
    const seconds = recordedWav.readUInt32LE(40) / 2 / rate; // 16-bit mono
    check(seconds > 0.3 && seconds < 10, `the recording lasts ${seconds} s`);
    console.log(`recording: ${seconds.toFixed(2)} s of ${rate} Hz WAV sent, server answered (${recorded.meta})`);
    // Without a microphone Record says so and leaves the page as it was (the next steps use it).
    await page.evaluate(() => {
      navigator.mediaDevices.getUserMedia = () =>
        Promise.reject(new DOMException("Requested device not found", "NotFoundError"));
    });
    await page.click("#record");
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Cannot"));
    const noMicrophone = await page.textContent("#status");
    check(noMicrophone === "Cannot record: Requested device not found", `no microphone: '${noMicrophone}'`);
    check((await page.textContent("#record")) === "Record", "Record changed without a microphone");
    check((await page.textContent("#attached")) === "", "something was attached without a microphone");
    console.log(`no microphone: '${noMicrophone}'`);

    // 9. Video. Over the page's limit (20 MB): refused in the status line, nothing attached.
    await page.click("#new-chat");
    await page.setInputFiles("#video-file", {
      name: "big.mp4",
      mimeType: "video/mp4",
      buffer: Buffer.alloc(20 * 1000 * 1000 + 1),
    });
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Not attached"));
    const tooBig = await page.textContent("#status");
    check(
      tooBig === "Not attached: big.mp4 is 20.1 MB; the page sends videos of up to 20 MB",
      `an oversized clip: '${tooBig}'`,
    );
    const chip = page.locator("#attached .chip");
    check((await chip.count()) === 0, "the oversized clip was attached");
    console.log(`video over the limit: '${tooBig}'`);

    // A chosen clip is a chip: its name, the duration the browser reads (2 s), its size; × removes it.
    const clipName = basename(opts.video);
    const attachClip = async () => {
      await page.setInputFiles("#video-file", opts.video);
      await chip.waitFor({ timeout: 10000 });
      await page
        .waitForFunction(() => /^0:02 · /.test(document.querySelector("#attached .chip-detail").textContent), null, {
          timeout: 10000,
        })
        .catch(() => {}); // the check below says what it shows instead
      const detail = await chip.locator(".chip-detail").textContent();
      check((await chip.locator(".chip-name").textContent()) === clipName, "the chip does not name the clip");
      check(/^0:02 · \d+ KB$/.test(detail), `the chip shows '${detail}', not the duration and size`);
      return detail;
    };
    const chipDetail = await attachClip();
    await chip.locator(".chip-remove").click();
    check((await chip.count()) === 0 && (await page.textContent("#attached")) === "", "× did not remove the clip");
    console.log(`video chip: '${clipName}' '${chipDetail}', removed by ×`);

    // Sent: a video_url part holding the file as a data:video/mp4 URL, before the text; the real
    // server decodes it and answers; the history shows the clip and its name.
    const mp4Url = `data:video/mp4;base64,${readFileSync(opts.video).toString("base64")}`;
    const videoTurn = await sendWithMedia(page, "What happens in this clip?", async () => {
      await page.setInputFiles("#video-file", opts.video);
      await chip.waitFor({ timeout: 10000 });
    });
    const videoParts = videoTurn.body?.messages?.at(-1)?.content;
    check(
      Array.isArray(videoParts) && videoParts.length === 2 && videoParts[0].type === "video_url" &&
        videoParts[0].video_url.url === mp4Url && videoParts[1].type === "text" &&
        videoParts[1].text === "What happens in this clip?",
      `the clip was not sent as a video_url part: ${JSON.stringify(videoParts)?.slice(0, 200)}`,
    );
    const shownClip = page.locator(".message.user video.clip");
    check((await shownClip.count()) === 1, "the clip is not shown in the history");
    check((await shownClip.getAttribute("src")) === mp4Url, "the shown clip is not the attached file");
    check((await page.textContent(".message.user .media-name")) === clipName, "the history does not name the clip");
    check((await page.textContent("#attached")) === "", "the video attachment was not cleared");
    console.log(`video: ${clipName} sent as a video_url data:video/mp4 part, server answered (${videoTurn.meta})`);

    // A truncated clip: the server's 400 message is shown, the message leaves the history (its text
    // comes back to the composer), and the chat goes on without it.
    await page.setInputFiles("#video-file", opts.corruptVideo);
    await chip.waitFor({ timeout: 10000 });
    await sendMessage(page, "And this one?");
    const refused = assistant(page, 1);
    await refused.and(page.locator('[data-state="done"], [data-state="error"]')).waitFor({ timeout: 60000 });
    const refusal = await refused.locator(".meta").textContent();
    const corruptBytes = readFileSync(opts.corruptVideo).length;
    check(
      new RegExp(
        `^Error: The video is truncated or corrupt: its 'mdat' box ends at byte \\d+ but the file has ${corruptBytes} bytes$`,
      ).test(refusal),
      `the truncated clip's turn says '${refusal}'`,
    );
    const dropped = page.locator(".message.user").nth(1);
    check((await dropped.getAttribute("data-state")) === "dropped", "the refused message is not marked");
    check(
      (await dropped.locator(".meta").textContent()) === "Left out of the conversation: the request failed",
      "the refused message does not say it was left out",
    );
    check((await page.inputValue("#prompt")) === "And this one?", "the refused message's text did not come back");
    check(await page.isVisible("#send"), "Send is not back after the 400");
    check(await page.isEnabled("#prompt"), "the composer is disabled after the 400");
    const followUp = await sendWithMedia(page, "Describe the first clip again.", async () => {}, 2);
    const followMessages = followUp.body?.messages ?? [];
    check(
      followMessages.map((m) => m.role).join(",") === "user,assistant,user" &&
        followMessages[0].content[0].video_url?.url === mp4Url &&
        followMessages[2].content === "Describe the first clip again.",
      `the request after the 400 sent ${JSON.stringify(followMessages)?.slice(0, 300)}`,
    );
    console.log(`corrupt video: '${refusal}'; the next turn went without it (${followUp.meta})`);

    // For the eye: the clip in the history, the refused turn, a clip attached in the composer.
    const videoScreenshot = opts.screenshot.replace(/(\.png)?$/, "_video.png");
    await attachClip();
    await page.setViewportSize({ width: 1280, height: 1100 }); // the whole chat in view
    await page.screenshot({ path: videoScreenshot });
    await page.setViewportSize({ width: 1280, height: 800 });
    await chip.locator(".chip-remove").click();
    console.log(`screenshot: ${videoScreenshot}`);

    // 10. Example questions: one click sends the question with what it needs, nothing typed.
    await page.click("#new-chat");
    const exampleBodies = [];
    await page.route("**/v1/chat/completions", async (route) => {
      exampleBodies.push(route.request().postDataJSON());
      await page.evaluate((n) => (window.exampleCount = n), exampleBodies.length);
      await route.fulfill({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: cannedTextStream(opts.model, "canned answer"),
      });
    });
    const examples = [
      { prompt: "Hello", thinking: false, tools: false },
      { prompt: "What is the capital of Japan?", thinking: true, tools: false },
      { prompt: "What is the weather in Lyon?", thinking: false, tools: true },
      { prompt: "What is 47 + 38?", thinking: false, tools: false },
    ];
    for (const [i, want] of examples.entries()) {
      await page.locator(`#examples .example[data-prompt="${want.prompt}"]`).click();
      await page.waitForFunction((n) => window.exampleCount === n, i + 1, { timeout: 10000 });
      await assistant(page, 0).and(page.locator('[data-state="done"]')).waitFor({ timeout: 10000 });
      const body = exampleBodies[i];
      check(
        body?.messages?.length === 1 && body.messages[0].role === "user" && body.messages[0].content === want.prompt,
        `example '${want.prompt}' sent ${JSON.stringify(body?.messages)}`,
      );
      check(
        (await page.locator(".message.user .content").count()) === 1 &&
          (await page.locator(".message.user .content").textContent()) === want.prompt,
        `example '${want.prompt}' is not shown as the user's message`,
      );
      check(
        body.chat_template_kwargs?.enable_thinking === want.thinking,
        `example '${want.prompt}' sent enable_thinking ${body.chat_template_kwargs?.enable_thinking}`,
      );
      const toolNames = (body.tools ?? []).map((t) => t.function.name).join(",");
      check(toolNames === (want.tools ? "get_weather" : ""), `example '${want.prompt}' sent tools [${toolNames}]`);
    }
    check(
      exampleBodies.length === examples.length,
      `${examples.length} clicks sent ${exampleBodies.length} requests`,
    );
    check((await page.inputValue("#prompt")) === "", "an example left its text in the composer");
    await page.unroute("**/v1/chat/completions");
    console.log(`examples: ${examples.length} clicks sent their questions with their settings`);

    check(foreign.length === 0, `the page fetched from elsewhere: ${foreign.join(", ")}`);
    check(pageErrors.length === 0, `page errors: ${pageErrors.join("; ")}`);
  } finally {
    await browser.close();
  }
}

main().then(
  () => {
    console.log("PASS");
  },
  (e) => {
    console.log(`FAIL: ${e.message}`);
    process.exitCode = 1;
  },
);
