// End-to-end checks of `gemmaserve serve` with the official openai SDK.
// usage: node server_openai.mjs BASE_URL (api|stop|load)...
// BASE_URL is the server root (http://127.0.0.1:PORT); the model is served as "gemma4".
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.argv[2];
const suites = process.argv.slice(3);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const MODEL = 'gemma4';
const user = (content) => [{ role: 'user', content }];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const value = (name, labelPart = '') => {
    let sum = 0;
    let found = false;
    for (const line of text.split('\n')) {
      if (line.startsWith(name + '{') && line.includes(labelPart)) {
        sum += Number(line.slice(line.lastIndexOf(' ') + 1));
        found = true;
      }
    }
    assert.ok(found, `metric ${name} missing`);
    return sum;
  };
  return { text, value };
}

const api = {
  async chatNonStreaming() {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('Explain why graph execution improves decode performance.'),
      max_tokens: 8, temperature: 0,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.ok(r.usage.completion_tokens <= 8);
    assert.ok(!r.choices[0].message.content.includes('<turn|>'));
  },
  async chatStreamingMatchesNonStreaming() {
    const body = { model: MODEL, messages: user('Hello there'), max_tokens: 12, temperature: 0 };
    const whole = await client.chat.completions.create(body);
    const chunks = await collect(await client.chat.completions.create({
      ...body, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(chunks[0].choices[0].delta.content, '');
    const text = chunks.flatMap((c) => c.choices).map((c) => c.delta?.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content ?? '');
    const finish = chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason);
    assert.equal(finish.length, 1);
    assert.equal(finish[0].finish_reason, whole.choices[0].finish_reason);
    const usage = chunks[chunks.length - 1];
    assert.deepEqual(usage.choices, []);
    assert.deepEqual(usage.usage.completion_tokens, whole.usage.completion_tokens);
  },
  async chatNSamplesWithSeed() {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('Pick a number'), max_tokens: 5, n: 3, seed: 7, temperature: 1,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    const again = await client.chat.completions.create({
      model: MODEL, messages: user('Pick a number'), max_tokens: 5, n: 3, seed: 7, temperature: 1,
    });
    assert.deepEqual(again.choices.map((c) => c.message.content),
      r.choices.map((c) => c.message.content));
  },
  async chatStreamingSeveralChoices() {
    const body = { model: MODEL, messages: user('Two answers'), max_tokens: 6, n: 2, seed: 9 };
    const whole = await client.chat.completions.create(body);
    const chunks = await collect(await client.chat.completions.create({
      ...body, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true },
    }));
    for (const index of [0, 1]) {
      const mine = chunks.flatMap((c) => c.choices).filter((c) => c.index === index);
      assert.equal(mine[0].delta.role, 'assistant');
      assert.equal(mine.filter((c) => c.finish_reason).length, 1);
      assert.equal(mine.map((c) => c.delta?.content ?? '').join(''),
        whole.choices[index].message.content ?? '');
    }
    assert.ok(chunks.every((c) => c.usage));  // continuous usage stats
    assert.equal(chunks[chunks.length - 1].usage.completion_tokens, whole.usage.completion_tokens);
  },
  async chatLogprobs() {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('Hi'), max_tokens: 4, temperature: 0, logprobs: true,
      top_logprobs: 3, ignore_eos: true,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
      assert.equal(e.top_logprobs.length, 3);
      // Greedy: the chosen token is the most likely one.
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
    }
  },
  async chatTools() {
    const tools = [{
      type: 'function',
      function: {
        name: 'get_weather', description: 'Weather for a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    }];
    const plain = await client.chat.completions.create({
      model: MODEL, messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0,
    });
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0, tools,
    });
    // The template declares the tool in the prompt.
    assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 10);
    // vLLM leaves tool_calls out of a message without calls.
    const calls = r.choices[0].message.tool_calls;
    assert.ok(calls === undefined || (Array.isArray(calls) && calls.length > 0));
    // A whole tool round trip renders: assistant call, tool result, next turn.
    const followUp = await client.chat.completions.create({
      model: MODEL, max_tokens: 4, temperature: 0, tools,
      messages: [
        ...user('Weather in Paris?'),
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
      ],
    });
    assert.ok(followUp.usage.prompt_tokens > r.usage.prompt_tokens);
    const streamed = await collect(await client.chat.completions.create({
      model: MODEL, messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0, tools,
      tool_choice: 'auto', stream: true,
    }));
    assert.ok(streamed.length >= 2);
  },
  async chatToolChoiceForcesTheCall() {
    // Random weights never call a tool unasked: tool_choice "required" and a named function
    // must make them (vLLM enforces both by structured output).
    const fn = (name, properties = {}) => ({
      type: 'function', function: { name, parameters: { type: 'object', properties } },
    });
    const tools = [fn('get_weather', { city: { type: 'string' } }), fn('get_time')];
    const body = { model: MODEL, messages: user('Weather in Paris?'), max_tokens: 48, temperature: 0 };
    const named = await client.chat.completions.create({
      ...body, tools, tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    const m = named.choices[0].message;
    assert.equal(m.tool_calls.length >= 1, true, JSON.stringify(m));
    assert.equal(m.tool_calls[0].function.name, 'get_time');
    assert.equal(typeof JSON.parse(m.tool_calls[0].function.arguments), 'object');
    assert.equal(m.content, '');
    assert.notEqual(named.choices[0].finish_reason, 'tool_calls');  // vLLM: only for "auto"
    const one = await client.chat.completions.create({
      ...body, tools: [tools[0]], tool_choice: 'required',
    });
    assert.equal(one.choices[0].message.tool_calls[0].function.name, 'get_weather');
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        ...body, temperature: 1, seed, tools, tool_choice: 'required',
      });
      assert.ok(['get_weather', 'get_time'].includes(r.choices[0].message.tool_calls[0].function.name));
    }
    const chunks = await collect(await client.chat.completions.create({
      ...body, tools, tool_choice: { type: 'function', function: { name: 'get_time' } },
      stream: true,
    }));
    const deltas = chunks.flatMap((c) => c.choices).flatMap((c) => c.delta?.tool_calls ?? []);
    assert.equal(deltas[0].function.name, 'get_time');
    assert.equal(deltas.map((d) => d.function?.arguments ?? '').join(''),
      m.tool_calls[0].function.arguments);
    // vLLM: "stop" for a named function, streamed or not (OpenAI's rule).
    assert.notEqual(chunks.flatMap((c) => c.choices).at(-1).finish_reason, 'tool_calls');
  },
  async chatToolChoiceArgumentsFollowTheSchema() {
    // The arguments follow the tool's parameter schema (bounded so random weights finish).
    const parameters = {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 6 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
      },
      required: ['city', 'unit'],
    };
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters } }];
    for (const seed of [1, 2, 3, 4]) {
      for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
        const r = await client.chat.completions.create({
          model: MODEL, messages: user('Weather in Paris?'), max_tokens: 200, temperature: 1, seed,
          tools, tool_choice, chat_template_kwargs: { enable_thinking: false },
        });
        const calls = r.choices[0].message.tool_calls;
        assert.ok(calls.length >= 1, JSON.stringify(r));
        for (const c of calls) {
          const a = JSON.parse(c.function.arguments);
          assert.equal(typeof a.city, 'string', c.function.arguments);
          assert.ok([...a.city].length <= 6, c.function.arguments);
          assert.ok(['celsius', 'fahrenheit'].includes(a.unit), c.function.arguments);
          if ('days' in a) assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7);
          for (const k of Object.keys(a)) assert.ok(k in parameters.properties, k);
        }
      }
    }
  },
  async jsonObjectResponseFormat() {
    // Random weights write whatever: the mask keeps every answer a JSON object (or its
    // beginning, when max_tokens cuts it).
    const check = (text, finish) => {
      assert.ok(text.startsWith('{'), JSON.stringify(text));
      if (finish === 'stop') {
        const v = JSON.parse(text);
        assert.equal(typeof v, 'object');
        assert.ok(v !== null && !Array.isArray(v));
      }
    };
    let stopped = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: user('Reply in JSON.'), max_tokens: 24, temperature: 1, seed,
        response_format: { type: 'json_object' },
      });
      check(r.choices[0].message.content, r.choices[0].finish_reason);
      stopped += r.choices[0].finish_reason === 'stop';
      const c = await client.completions.create({
        model: MODEL, prompt: 'JSON:', max_tokens: 24, temperature: 1, seed,
        response_format: { type: 'json_object' },
      });
      check(c.choices[0].text, c.choices[0].finish_reason);
    }
    assert.ok(stopped > 0, 'no answer finished inside 24 tokens');
    const body = {
      model: MODEL, messages: user('Reply in JSON.'), max_tokens: 16, temperature: 0,
      response_format: { type: 'json_object' },
    };
    const whole = await client.chat.completions.create(body);
    const chunks = await collect(await client.chat.completions.create({ ...body, stream: true }));
    const text = chunks.flatMap((x) => x.choices).map((x) => x.delta?.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content);
  },
  async jsonSchemaResponseFormat() {
    // The SDK's json_schema response_format: every finished answer validates (keys in schema
    // order, required ones present, types and the enum kept), streamed or not.
    const schema = {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 8 },
        rank: { type: 'integer' },
        kind: { enum: ['town', 'village'] },
        flags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 },
      },
      required: ['city', 'kind'],
    };
    const response_format = {
      type: 'json_schema', json_schema: { name: 'place', schema, strict: true },
    };
    const validate = (text) => {
      const v = JSON.parse(text);
      assert.equal(typeof v.city, 'string');
      assert.ok(['town', 'village'].includes(v.kind), text);
      if ('rank' in v) assert.ok(Number.isInteger(v.rank), text);
      if ('flags' in v) assert.ok(v.flags.every((f) => typeof f === 'boolean'), text);
      for (const k of Object.keys(v)) assert.ok(k in schema.properties, text);
    };
    let stopped = 0;
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: user('Name a place.'), max_tokens: 200, temperature: 1, seed,
        response_format, chat_template_kwargs: { enable_thinking: false },
      });
      if (r.choices[0].finish_reason === 'stop') {
        validate(r.choices[0].message.content);
        stopped += 1;
      }
    }
    assert.ok(stopped > 0, 'no answer finished inside 200 tokens');
    const body = {
      model: MODEL, messages: user('Name a place.'), max_tokens: 200, temperature: 0,
      response_format, chat_template_kwargs: { enable_thinking: false },
    };
    const whole = await client.chat.completions.create(body);
    const chunks = await collect(await client.chat.completions.create({ ...body, stream: true }));
    const text = chunks.flatMap((x) => x.choices).map((x) => x.delta?.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content);
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL, messages: user('x'), max_tokens: 4,
        response_format: {
          type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'uri' } },
        },
      }),
      (e) => e.status === 400 && /unsupported JSON Schema format 'uri'/.test(e.message));
  },
  async chatEchoAndContinueFinalMessage() {
    const body = {
      model: MODEL, messages: [...user('Hi'), { role: 'assistant', content: 'Well,' }],
      add_generation_prompt: false, continue_final_message: true, echo: true, max_tokens: 3,
      temperature: 0, ignore_eos: true,
    };
    const r = await client.chat.completions.create(body);
    assert.ok(r.choices[0].message.content.startsWith('Well,'), r.choices[0].message.content);
    const chunks = await collect(await client.chat.completions.create({ ...body, stream: true }));
    const text = chunks.flatMap((c) => c.choices).map((c) => c.delta?.content ?? '').join('');
    assert.equal(text, r.choices[0].message.content);
  },
  async completionsNonStreaming() {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Explain why graph execution improves decode performance.',
      max_tokens: 8, temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.choices[0].index, 0);
    assert.equal(typeof r.choices[0].text, 'string');
    assert.ok(r.usage.completion_tokens <= 8);
  },
  async completionsDefaultMaxTokensIs16() {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time', temperature: 0, ignore_eos: true,
    });
    assert.equal(r.usage.completion_tokens, 16);
    assert.equal(r.choices[0].finish_reason, 'length');
  },
  async completionsStreamingMatches() {
    const body = { model: MODEL, prompt: 'The capital of France is', max_tokens: 10, temperature: 0 };
    const whole = await client.completions.create(body);
    const chunks = await collect(await client.completions.create({ ...body, stream: true }));
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), whole.choices[0].text);
    assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, whole.choices[0].finish_reason);
  },
  async completionsStreamingUsage() {
    const chunks = await collect(await client.completions.create({
      model: MODEL, prompt: ['a', 'b'], max_tokens: 3, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    }));
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 6);
    const finished = chunks.flatMap((c) => c.choices).filter((c) => c.finish_reason);
    assert.deepEqual(finished.map((c) => c.index).sort(), [0, 1]);
  },
  async completionsBatchedPrompts() {
    const r = await client.completions.create({
      model: MODEL, prompt: ['one', 'two two', [2, 651, 6037]], max_tokens: 3, n: 2, seed: 3,
    });
    assert.deepEqual(r.choices.map((c) => c.index).sort((a, b) => a - b), [0, 1, 2, 3, 4, 5]);
  },
  async completionsEchoLogprobsLikeLmEval() {
    // lm-eval local-completions loglikelihood request.
    const prompt = [2, 651, 6037, 529, 6081, 563];
    const r = await client.completions.create({
      model: MODEL, prompt: [prompt], max_tokens: 1, temperature: 0, logprobs: 1, echo: true,
      seed: 1234,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, prompt.length + 1);
    assert.equal(lp.token_logprobs.length, prompt.length + 1);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < lp.tokens.length; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.ok(lp.tokens[i] in lp.top_logprobs[i], `top_logprobs[${i}] lacks the token`);
    }
    // max_tokens 0: only the echo, its first logprob null.
    const zero = await client.completions.create({
      model: MODEL, prompt: 'Hello world', max_tokens: 0, logprobs: 1, echo: true,
    });
    assert.equal(zero.choices[0].text, 'Hello world');
    assert.equal(zero.choices[0].logprobs.token_logprobs[0], null);
    assert.equal(zero.usage.completion_tokens, 1);  // vLLM counts the one token it ran
  },
  async tokenizeRoundTrip() {
    const post = async (path, body) => (await fetch(`${base}${path}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL, ...body }),
    })).json();
    // Default: the prompt the model sees, one <bos> first; false: the text's tokens alone.
    for (const [addSpecial, text] of [[true, '<bos>Hello world'], [false, 'Hello world']]) {
      const t = await post('/tokenize', { prompt: 'Hello world', add_special_tokens: addSpecial });
      assert.equal(t.count, t.tokens.length);
      assert.equal(t.tokens[0] === 2, addSpecial);
      const d = await post('/detokenize', { tokens: t.tokens });
      assert.equal(d.prompt, text);
    }
  },
  async modelsList() {
    const list = await client.models.list();
    assert.equal(list.data[0].id, MODEL);
    assert.equal(list.data[0].owned_by, 'vllm');
  },
  async badRequestRaisesBadRequestError() {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages: user('x'), top_p: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
    await assert.rejects(
      client.chat.completions.create({ model: 'nope', messages: user('x') }),
      (e) => e instanceof OpenAI.NotFoundError);
  },
};

// The Gemma end-of-turn trap: no `stop`, <turn|> forced after min_tokens; the turn must end there.
const stop = {
  async chatStopsAtEndOfTurn() {
    const body = {
      model: MODEL, messages: user('What is 1+1?'), max_tokens: 50, min_tokens: 3,
      logit_bias: { 106: 100 }, seed: 11,
    };
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].stop_reason, 106);
    assert.equal(r.usage.completion_tokens, 4);  // 3 forced tokens, then <turn|>
    assert.ok(!(r.choices[0].message.content ?? '').includes('<turn|>'));
    const chunks = await collect(await client.chat.completions.create({ ...body, stream: true }));
    const choices = chunks.flatMap((c) => c.choices);
    assert.equal(choices.filter((c) => c.finish_reason).map((c) => c.finish_reason).join(), 'stop');
    const text = choices.map((c) => c.delta?.content ?? '').join('');
    assert.ok(!text.includes('<turn|>'));
    assert.equal(text, r.choices[0].message.content ?? '');
  },
  async completionStopsAtEndOfTurnToo() {
    const r = await client.completions.create({
      model: MODEL, prompt: '<|turn>user\nWhat is 1+1?<turn|>\n<|turn>model\n', max_tokens: 100,
      temperature: 0, min_tokens: 3, logit_bias: { 106: 100 },
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.completion_tokens, 4);
    assert.ok(!r.choices[0].text.includes('<turn|>'));
  },
};

const load = {
  async sixtyFourConcurrentStreams() {
    const runs = Array.from({ length: 64 }, async (_, i) => {
      const stream = await client.chat.completions.create({
        model: MODEL, messages: user(`Request ${i}: say something`), max_tokens: 16,
        ignore_eos: true, stream: true,
      });
      let chunks = 0;
      let finish = null;
      for await (const c of stream) {
        chunks += 1;
        for (const ch of c.choices) finish = ch.finish_reason ?? finish;
      }
      assert.equal(finish, 'length');
      return chunks;
    });
    const results = await Promise.allSettled(runs);
    const failed = results.filter((r) => r.status === 'rejected');
    assert.equal(failed.length, 0, failed.map((f) => String(f.reason)).join('\n'));
  },
  async halfDisconnectAndEveryBlockComesBack() {
    const runs = Array.from({ length: 64 }, async (_, i) => {
      const controller = new AbortController();
      const disconnect = i % 2 === 0;
      const stream = await client.completions.create({
        model: MODEL, prompt: `Stream ${i} goes on and on`, ignore_eos: true, stream: true,
        max_tokens: disconnect ? 4000 : 8,
      }, { signal: controller.signal });
      let n = 0;
      try {
        for await (const _ of stream) {
          n += 1;
          if (disconnect && n === 3) controller.abort();
        }
      } catch (e) {
        if (!disconnect) throw e;
      }
      return n;
    });
    const results = await Promise.allSettled(runs);
    const failed = results.filter((r) => r.status === 'rejected');
    assert.equal(failed.length, 0, failed.map((f) => String(f.reason)).join('\n'));
    // Bounded wait for the server to notice the disconnects; 4000-token runs would take far longer.
    const deadline = Date.now() + 20000;
    let m;
    for (;;) {
      m = await metrics();
      if (m.value('gemmaserve:kv_blocks_in_use') === 0 && m.value('vllm:num_requests_running') === 0) break;
      assert.ok(Date.now() < deadline, `KV blocks still in use:\n${m.text}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(m.value('vllm:request_success_total', 'finished_reason="abort"') >= 32);
    assert.ok(m.value('vllm:generation_tokens_total') > 0);
    assert.ok(m.value('vllm:time_to_first_token_seconds_count') > 0);
  },
};

const all = { api, stop, load };
let failures = 0;
for (const name of suites) {
  for (const [test, fn] of Object.entries(all[name])) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok   ${name}.${test} (${Date.now() - t0} ms)`);
    } catch (e) {
      failures += 1;
      console.log(`FAIL ${name}.${test}: ${e.stack ?? e}`);
    }
  }
}
process.exit(failures ? 1 : 0);
