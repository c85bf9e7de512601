#!/usr/bin/python3
"""Trains gemmaserve's demo model: a small Gemma 4 (sliding + full layers, k_eq_v, KV sharing,
per-layer embeddings) with its own BPE tokenizer, on generated arithmetic, capitals, get_weather
tool calls and thinking. Writes a Hugging Face folder the C++ engine serves.

Run with Debian's torch (CPU): /usr/bin/python3 tools/train_demo_model.py --out DIR trains from
scratch (stage 1); --init DIR continues from a folder this script wrote (stages 2-4).
tools/demo_model/train.sh runs the four stages that made models/gemma4-demo.
  --check-logits DIR   only run the torch forward on DIR's weights and write reference logits
Everything is seeded; the same command on the same torch gives the same model.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import jinja2
import torch
import torch.nn.functional as F

import demo_model_skills

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "demo_model")
SEED = 1234

# Gemma 4's special tokens, at the texts the real tokenizer uses (ids are this vocabulary's own).
SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<unk>", "<mask>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>",
    '<|"|>', "<|think|>", "<|channel>", "<channel|>", "<|turn>", "<turn|>",
    "<|image>", "<|audio>", "<|image|>", "<|audio|>", "<image|>", "<audio|>", "<|video|>",
]
SP = "\u2581"  # SentencePiece's visible space, as in Gemma's tokenizer

COUNTRIES = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Russia", "Moscow"), ("Poland", "Warsaw"), ("Greece", "Athens"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Ireland", "Dublin"),
    ("Austria", "Vienna"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Turkey", "Ankara"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("South Korea", "Seoul"),
    ("Morocco", "Rabat"),
]
WEATHER_CITIES = [c for _, c in COUNTRIES] + [
    "Lyon", "Marseille", "Munich", "Hamburg", "Milan", "Barcelona", "Porto", "Osaka", "Toronto",
    "Sydney", "Chicago", "Boston", "Seattle", "London", "Edinburgh", "Zurich", "Geneva", "Prague",
    "Budapest", "Krakow", "Seville", "Naples", "Nice", "Bordeaux",
]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}

CAPITAL_QUESTIONS = [
    "What is the capital of {c}?", "Which city is the capital of {c}?",
    "Name the capital of {c}.", "What's the capital city of {c}?", "Tell me the capital of {c}.",
]
ADD_QUESTIONS = ["What is {a} + {b}?", "What is {a} plus {b}?", "Compute {a} + {b}.",
                 "{a} + {b} = ?"]
SUB_QUESTIONS = ["What is {a} - {b}?", "What is {a} minus {b}?", "Compute {a} - {b}.",
                 "{a} - {b} = ?"]
WEATHER_QUESTIONS = ["What's the weather in {c}?", "What is the weather like in {c}?",
                     "How is the weather in {c} today?", "Is it sunny in {c}?"]


# ------------------------------------------------------------------------------------------
# Data


def arithmetic_pairs():
    """All two-digit (a, op, b): sums, and differences with a >= b; a fixed tenth held out."""
    pairs = [(a, "+", b) for a in range(10, 100) for b in range(10, 100)]
    pairs += [(a, "-", b) for a in range(10, 100) for b in range(10, 100) if a >= b]
    rng = random.Random(SEED)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    held = set(order[: len(pairs) // 10])
    train = [p for i, p in enumerate(pairs) if i not in held]
    heldout = sorted((p for i, p in enumerate(pairs) if i in held), key=lambda p: (p[1], p[0], p[2]))
    return train, heldout


def write_heldout(path, heldout):
    with open(path, "w") as f:
        f.write("# Held-out two-digit arithmetic (never trained on): a op b = answer\n")
        for a, op, b in heldout:
            f.write(f"{a} {op} {b} = {a + b if op == '+' else a - b}\n")


def read_heldout(path):
    """The model folder's held-out list (what `gemmaserve eval arithmetic` reads) as (a, op, b)."""
    with open(path) as f:
        rows = [line.split() for line in f if line.strip() and not line.startswith("#")]
    return [(int(a), op, int(b)) for a, op, b, _, _ in rows]


def arithmetic_answer(a, op, b):
    return f"{a} {op} {b} = {a + b if op == '+' else a - b}."


def load_template():
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=False)
    with open(os.path.join(DATA_DIR, "chat_template.jinja")) as f:
        return env.from_string(f.read())


class SampleMaker:
    """Renders (prompt, completion) text pairs through the demo's own chat template."""

    def __init__(self, rng, compact_results=False):
        self.rng = rng
        self.template = load_template()
        self.compact_results = compact_results

    def render(self, messages, tools=None, thinking=False):
        return self.template.render(messages=messages, tools=tools, add_generation_prompt=True,
                                    enable_thinking=thinking, bos_token="<bos>")

    def arithmetic(self, a, op, b, thinking):
        qs = ADD_QUESTIONS if op == "+" else SUB_QUESTIONS
        q = self.rng.choice(qs).format(a=a, b=b)
        ans = arithmetic_answer(a, op, b)
        prompt = self.render([{"role": "user", "content": q}], thinking=thinking)
        if thinking:
            verb = "add" if op == "+" else "subtract"
            word = "sum" if op == "+" else "difference"
            r = a + b if op == "+" else a - b
            thought = f"I {verb} {b} {'to' if op == '+' else 'from'} {a}. The {word} is {r}."
            return prompt, f"<|channel>thought\n{thought}<channel|>{ans}<turn|>"
        return prompt, ans + "<turn|>"

    def capital(self, country, city, thinking):
        q = self.rng.choice(CAPITAL_QUESTIONS).format(c=country)
        ans = f"The capital of {country} is {city}."
        prompt = self.render([{"role": "user", "content": q}], thinking=thinking)
        if thinking:
            thought = f"The question asks about {country}. Its capital is {city}."
            return prompt, f"<|channel>thought\n{thought}<channel|>{ans}<turn|>"
        return prompt, ans + "<turn|>"

    def weather_call(self, city):
        q = self.rng.choice(WEATHER_QUESTIONS).format(c=city)
        prompt = self.render([{"role": "user", "content": q}], tools=[WEATHER_TOOL])
        return prompt, f'<|tool_call>call:get_weather{{city:<|"|>{city}<|"|>}}<tool_call|><|tool_response>'

    def weather_answer(self, city):
        q = self.rng.choice(WEATHER_QUESTIONS).format(c=city)
        cond = self.rng.choice(CONDITIONS)
        temp = self.rng.randint(0, 35)
        # Clients send the arguments back as the JSON text they received (or as an object).
        args = self.rng.choice([{"city": city}, json.dumps({"city": city}),
                                json.dumps({"city": city}, separators=(",", ":"))])
        forms = [json.dumps({"temperature": temp, "condition": cond}),
                 json.dumps({"city": city, "temperature": temp, "condition": cond}),
                 f"{cond}, {temp} C"]
        if self.compact_results:  # JavaScript clients send JSON.stringify's form, without spaces
            forms += [json.dumps({"temperature": temp, "condition": cond}, separators=(",", ":")),
                      json.dumps({"city": city, "temperature": temp, "condition": cond},
                                 separators=(",", ":"))]
        result = self.rng.choice(forms)
        messages = [
            {"role": "user", "content": q},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]
        prompt = self.render(messages, tools=[WEATHER_TOOL])
        return prompt, f"It is {cond} in {city}, {temp} degrees C.<turn|>"


def build_samples(rng, train_pairs, compact_results=False, skills=0):
    """Every category's (prompt, completion) pairs; `skills` greetings and out-of-skill questions
    come last, so asking for them leaves the other categories' samples as they were."""
    maker = SampleMaker(rng, compact_results)
    cats = {"arith": [], "capital": [], "call": [], "answer": []}
    for (a, op, b) in train_pairs:
        cats["arith"].append(maker.arithmetic(a, op, b, thinking=rng.random() < 0.15))
    for _ in range(30):
        for (country, city) in COUNTRIES:
            cats["capital"].append(maker.capital(country, city, thinking=rng.random() < 0.3))
    for _ in range(40):
        for city in WEATHER_CITIES:
            cats["call"].append(maker.weather_call(city))
            cats["answer"].append(maker.weather_answer(city))
    if skills:
        cats["skills"] = demo_model_skills.skills_samples(
            maker, rng, [c for c, _ in COUNTRIES], WEATHER_CITIES, WEATHER_TOOL, skills)
    return cats


# ------------------------------------------------------------------------------------------
# Tokenizer: BPE over words (split before each SP), digits never merged, byte fallback.


def pieces_of(text):
    """Splits text into spans: special tokens whole, other text as SP-prefixed words."""
    out = []
    i = 0
    buf = ""
    specials = sorted(SPECIAL_TOKENS, key=len, reverse=True)
    while i < len(text):
        hit = next((s for s in specials if text.startswith(s, i)), None)
        if hit:
            if buf:
                out.append(("text", buf))
                buf = ""
            out.append(("special", hit))
            i += len(hit)
        else:
            buf += text[i]
            i += 1
    if buf:
        out.append(("text", buf))
    return out


def words_of(span):
    s = span.replace(" ", SP)
    words = []
    cur = ""
    for ch in s:
        if ch == SP and cur:
            words.append(cur)
            cur = ""
        cur += ch
    if cur:
        words.append(cur)
    return words


def mergeable(a, b):
    return not any(ch.isdigit() for ch in a + b)


def train_bpe(texts, vocab_target):
    freq = {}
    chars = set()
    for t in texts:
        for kind, span in pieces_of(t):
            if kind != "text":
                continue
            for w in words_of(span):
                freq[w] = freq.get(w, 0) + 1
                chars.update(w)
    words = {w: list(w) for w in freq}
    base = sorted(chars)
    n_fixed = len(SPECIAL_TOKENS) + 256
    merges = []
    vocab_set = set(base)
    while n_fixed + len(base) + len(merges) < vocab_target:
        counts = {}
        for w, toks in words.items():
            for x, y in zip(toks, toks[1:]):
                if mergeable(x, y):
                    counts[(x, y)] = counts.get((x, y), 0) + freq[w]
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if best[1] < 2:
            break
        (x, y) = best[0]
        new = x + y
        vocab_set.add(new)
        merges.append((x, y))
        for w, toks in words.items():
            i = 0
            out = []
            while i < len(toks):
                if i + 1 < len(toks) and toks[i] == x and toks[i + 1] == y:
                    out.append(new)
                    i += 2
                else:
                    out.append(toks[i])
                    i += 1
            words[w] = out
    vocab = list(SPECIAL_TOKENS) + [f"<0x{b:02X}>" for b in range(256)]
    seen = set(vocab)
    for tok in base + [x + y for x, y in merges]:
        if tok not in seen:
            vocab.append(tok)
            seen.add(tok)
    return vocab, merges


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ids = {t: i for i, t in enumerate(vocab)}
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.cache = {}

    def encode_word(self, w):
        if w in self.cache:
            return self.cache[w]
        toks = []
        for ch in w:
            if ch in self.ids:
                toks.append(ch)
            else:
                toks += [f"<0x{b:02X}>" for b in ch.encode("utf-8")]
        while len(toks) > 1:
            ranked = [(self.ranks[(x, y)], i) for i, (x, y) in enumerate(zip(toks, toks[1:]))
                      if (x, y) in self.ranks]
            if not ranked:
                break
            _, i = min(ranked)
            pair = (toks[i], toks[i + 1])
            out = []
            i = 0
            while i < len(toks):
                if i + 1 < len(toks) and (toks[i], toks[i + 1]) == pair:
                    out.append(toks[i] + toks[i + 1])
                    i += 2
                else:
                    out.append(toks[i])
                    i += 1
            toks = out
        ids = [self.ids[t] for t in toks]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for kind, span in pieces_of(text):
            if kind == "special":
                out.append(self.ids[span])
            else:
                for w in words_of(span):
                    out += self.encode_word(w)
        return out

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids).replace(SP, " ")


def tokenizer_json(vocab, merges):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIAL_TOKENS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
        # As Gemma's: each span between added tokens is one BPE word. No merge joins a piece to a
        # following SP, so this equals BPE word by word (what Tokenizer.encode does).
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab)},
                  "merges": [[a, b] for a, b in merges]},
    }


# ------------------------------------------------------------------------------------------
# Model (f32, the same math as gemmaserve's C++ forward)


def model_config(vocab_size):
    return {
        "vocab_size": vocab_size, "vocab_size_per_layer_input": vocab_size,
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "global_head_dim": 64, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
        "sliding_window": 16, "num_kv_shared_layers": 1, "use_double_wide_mlp": False,
        "hidden_size_per_layer_input": 16,
        "enable_moe_block": False,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}},
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06,
        "final_logit_softcapping": 30.0, "use_bidirectional_attention": None,
        "attention_bias": False, "max_position_embeddings": 4096, "tie_word_embeddings": True,
        "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "model_type": "gemma4_text",
        "dtype": "float32",
    }


def rms(x, w, eps=1e-6):
    y = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)
    return y * w if w is not None else y


def rope_tables(cfg, T):
    tabs = {}
    pos = torch.arange(T, dtype=torch.float32)
    for kind, d in (("sliding_attention", cfg["head_dim"]), ("full_attention", cfg["global_head_dim"])):
        rp = cfg["rope_parameters"][kind]
        half = d // 2
        rotated = half
        if rp["rope_type"] == "proportional":
            rotated = min(half, int(math.floor(rp["partial_rotary_factor"] * d / 2.0)))
        i = torch.arange(half, dtype=torch.float32)
        inv = 1.0 / (rp["rope_theta"] ** (2 * i / d))
        inv[rotated:] = 0.0
        ang = pos[:, None] * inv[None, :]
        tabs[kind] = (torch.cos(ang), torch.sin(ang))
    return tabs


def apply_rope(x, cos, sin):
    # x [B, T, h, d]; NeoX rotate-half pairs (i, i + d/2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class DemoGemma4(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, V, L, P = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"]
        I, nH = cfg["intermediate_size"], cfg["num_attention_heads"]
        g = torch.Generator().manual_seed(SEED)

        def lin(o, i):
            return torch.nn.Parameter(torch.randn(o, i, generator=g) / math.sqrt(i))

        def ones(n):
            return torch.nn.Parameter(torch.ones(n))

        self.params = torch.nn.ParameterDict()  # keys use "__" for "." (torch forbids dots)
        self["embed_tokens.weight"] = torch.nn.Parameter(torch.randn(V, H, generator=g) * 0.05)
        self["norm.weight"] = ones(H)
        self["embed_tokens_per_layer.weight"] = torch.nn.Parameter(torch.randn(V, L * P, generator=g) * 0.05)
        self["per_layer_model_projection.weight"] = lin(L * P, H)
        self["per_layer_projection_norm.weight"] = ones(P)
        self.first_shared = L - cfg["num_kv_shared_layers"]
        self.layer_info = []
        for l, kind in enumerate(cfg["layer_types"]):
            full = kind == "full_attention"
            hd = cfg["global_head_dim"] if full else cfg["head_dim"]
            nkv = cfg["num_global_key_value_heads"] if full else cfg["num_key_value_heads"]
            shared = l >= self.first_shared
            src = l
            if shared:
                src = max(j for j in range(self.first_shared) if cfg["layer_types"][j] == kind)
            self.layer_info.append((kind, hd, nkv, shared, src, full))
            pre = f"layers.{l}."
            self[pre + "input_layernorm.weight"] = ones(H)
            self[pre + "post_attention_layernorm.weight"] = ones(H)
            self[pre + "pre_feedforward_layernorm.weight"] = ones(H)
            self[pre + "post_feedforward_layernorm.weight"] = ones(H)
            self[pre + "self_attn.q_proj.weight"] = lin(nH * hd, H)
            self[pre + "self_attn.q_norm.weight"] = ones(hd)
            if not shared:
                self[pre + "self_attn.k_proj.weight"] = lin(nkv * hd, H)
                self[pre + "self_attn.k_norm.weight"] = ones(hd)
                if not full:
                    self[pre + "self_attn.v_proj.weight"] = lin(nkv * hd, H)
            self[pre + "self_attn.o_proj.weight"] = torch.nn.Parameter(lin(H, nH * hd).data * 0.5)
            self[pre + "mlp.gate_proj.weight"] = lin(I, H)
            self[pre + "mlp.up_proj.weight"] = lin(I, H)
            self[pre + "mlp.down_proj.weight"] = lin(H, I)
            self[pre + "per_layer_input_gate.weight"] = lin(P, H)
            self[pre + "per_layer_projection.weight"] = lin(H, P)
            self[pre + "post_per_layer_input_norm.weight"] = torch.nn.Parameter(torch.full((H,), 0.1))
            self[pre + "layer_scalar"] = torch.nn.Parameter(torch.ones(1))

    def __setitem__(self, name, value):
        self.params[name.replace(".", "__")] = value

    def __getitem__(self, name):
        return self.params[name.replace(".", "__")]

    def named_weights(self):
        return {k.replace("__", "."): v for k, v in self.params.items()}

    def w(self, name):
        return self[name]

    def forward(self, ids):
        cfg = self.cfg
        B, T = ids.shape
        H, L, P = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["hidden_size_per_layer_input"]
        nH, W, eps = cfg["num_attention_heads"], cfg["sliding_window"], cfg["rms_norm_eps"]
        x = self.w("embed_tokens.weight")[ids] * float(math.sqrt(H))
        tok = self.w("embed_tokens_per_layer.weight")[ids] * float(math.sqrt(P))
        ctx = (x @ self.w("per_layer_model_projection.weight").t()) * float(1.0 / math.sqrt(H))
        ctx = rms(ctx.view(B, T, L, P), self.w("per_layer_projection_norm.weight"), eps)
        ple = (ctx + tok.view(B, T, L, P)) * float(1.0 / math.sqrt(2.0))
        tabs = rope_tables(cfg, T)
        q_idx = torch.arange(T)[:, None]
        k_idx = torch.arange(T)[None, :]
        causal = k_idx <= q_idx
        masks = {"full_attention": causal, "sliding_attention": causal & (q_idx - k_idx < W)}
        kv = {}
        for l, (kind, hd, nkv, shared, src, full) in enumerate(self.layer_info):
            pre = f"layers.{l}."
            cos, sin = tabs[kind]
            a = rms(x, self.w(pre + "input_layernorm.weight"), eps)
            q = (a @ self.w(pre + "self_attn.q_proj.weight").t()).view(B, T, nH, hd)
            q = apply_rope(rms(q, self.w(pre + "self_attn.q_norm.weight"), eps), cos, sin)
            if not shared:
                kraw = (a @ self.w(pre + "self_attn.k_proj.weight").t()).view(B, T, nkv, hd)
                vraw = kraw if full else (a @ self.w(pre + "self_attn.v_proj.weight").t()).view(B, T, nkv, hd)
                k = apply_rope(rms(kraw, self.w(pre + "self_attn.k_norm.weight"), eps), cos, sin)
                v = rms(vraw, None, eps)
                kv[l] = (k, v)
            k, v = kv[src]
            rep = nH // nkv
            kk = k.repeat_interleave(rep, dim=2).transpose(1, 2)  # [B, nH, T, hd]
            vv = v.repeat_interleave(rep, dim=2).transpose(1, 2)
            qq = q.transpose(1, 2)
            scores = qq @ kk.transpose(-1, -2)  # scaling 1.0
            scores = scores.masked_fill(~masks[kind], float("-inf"))
            o = (torch.softmax(scores, dim=-1) @ vv).transpose(1, 2).reshape(B, T, nH * hd)
            o = o @ self.w(pre + "self_attn.o_proj.weight").t()
            x = x + rms(o, self.w(pre + "post_attention_layernorm.weight"), eps)
            h = rms(x, self.w(pre + "pre_feedforward_layernorm.weight"), eps)
            m = F.gelu(h @ self.w(pre + "mlp.gate_proj.weight").t(), approximate="tanh") * (
                h @ self.w(pre + "mlp.up_proj.weight").t())
            m = m @ self.w(pre + "mlp.down_proj.weight").t()
            x = x + rms(m, self.w(pre + "post_feedforward_layernorm.weight"), eps)
            gte = F.gelu(x @ self.w(pre + "per_layer_input_gate.weight").t(), approximate="tanh") * ple[:, :, l, :]
            d = gte @ self.w(pre + "per_layer_projection.weight").t()
            x = x + rms(d, self.w(pre + "post_per_layer_input_norm.weight"), eps)
            x = x * self.w(pre + "layer_scalar")
        x = rms(x, self.w("norm.weight"), eps)
        logits = x @ self.w("embed_tokens.weight").t()
        cap = cfg["final_logit_softcapping"]
        return cap * torch.tanh(logits / cap)


# ------------------------------------------------------------------------------------------
# Files


PREFIX = "model.language_model."


def save_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", name
        a, b = meta["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=np.float32).copy()).view(meta["shape"])
    return out


def write_folder(out, model, vocab, merges, tok, heldout):
    os.makedirs(out, exist_ok=True)
    text_cfg = model.cfg
    ids = tok.ids
    config = {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "tie_word_embeddings": True,
        "eos_token_id": [ids["<eos>"], ids["<turn|>"], ids["<|tool_response>"]],
        "pad_token_id": ids["<pad>"], "bos_token_id": ids["<bos>"],
        "image_token_id": ids["<|image|>"], "boi_token_id": ids["<|image>"],
        "eoi_token_id": ids["<image|>"], "video_token_id": ids["<|video|>"],
        "audio_token_id": ids["<|audio|>"], "boa_token_id": ids["<|audio>"],
        "eoa_token_id": ids["<audio|>"], "eoa_token_index": ids["<audio|>"],
        "text_config": text_cfg, "vision_config": None, "audio_config": None,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": ids["<bos>"], "pad_token_id": ids["<pad>"],
           "eos_token_id": [ids["<eos>"], ids["<turn|>"], ids["<|tool_response>"]],
           "do_sample": False}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    tk_cfg = {
        "tokenizer_class": "GemmaTokenizer", "add_bos_token": False, "add_eos_token": False,
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "<mask>", "sot_token": "<|turn>", "eot_token": "<turn|>",
        "soc_token": "<|channel>", "eoc_token": "<channel|>", "think_token": "<|think|>",
        "stc_token": "<|tool_call>", "etc_token": "<tool_call|>", "std_token": "<|tool>",
        "etd_token": "<tool|>", "str_token": "<|tool_response>", "etr_token": "<tool_response|>",
        "escape_token": '<|"|>', "model_max_length": 4096,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tk_cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(DATA_DIR, "chat_template.jinja")) as src, \
            open(os.path.join(out, "chat_template.jinja"), "w") as dst:
        dst.write(src.read())
    write_heldout(os.path.join(out, "heldout.txt"), heldout)
    save_safetensors(os.path.join(out, "model.safetensors"),
                     {PREFIX + k: v for k, v in model.named_weights().items()})


# ------------------------------------------------------------------------------------------
# Training


def make_batch(samples, idx, pad_id, emphasis_id=None, emphasis=1.0):
    """Ids, next-token targets (-100 outside the completion) and per-target loss weights:
    `emphasis` for completion tokens after the first `emphasis_id` (an arithmetic result)."""
    seqs = [samples[i] for i in idx]
    T = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    tgt = torch.full((len(seqs), T), -100, dtype=torch.long)
    wts = torch.ones((len(seqs), T))
    for r, (toks, n_prompt) in enumerate(seqs):
        ids[r, : len(toks)] = torch.tensor(toks)
        # position t predicts token t+1; learn only the completion tokens
        tgt[r, n_prompt - 1: len(toks) - 1] = torch.tensor(toks[n_prompt:])
        if emphasis_id is not None and emphasis_id in toks[n_prompt:]:
            first = toks.index(emphasis_id, n_prompt)
            wts[r, first: len(toks) - 1] = emphasis
    return ids, tgt, wts


def greedy(model, tok, prompt, max_new=40):
    ids = tok.encode(prompt)
    stops = {tok.ids["<turn|>"], tok.ids["<|tool_response>"], tok.ids["<eos>"]}
    out = []
    with torch.no_grad():
        for _ in range(max_new):
            logits = model(torch.tensor([ids + out]))[0, -1]
            n = int(logits.argmax())
            out.append(n)
            if n in stops:
                break
    return tok.decode(out)


def load_tokenizer(folder):
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tj = json.load(f)
    vocab = [None] * len(tj["model"]["vocab"])
    for t, i in tj["model"]["vocab"].items():
        vocab[i] = t
    merges = [tuple(m) for m in tj["model"]["merges"]]
    return vocab, merges, Tokenizer(vocab, merges)


def load_model(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)["text_config"]
    model = DemoGemma4(cfg)
    st = load_safetensors(os.path.join(folder, "model.safetensors"))
    with torch.no_grad():
        for k, v in model.named_weights().items():
            v.copy_(st[PREFIX + k])
    return model


def split_thinking(cats):
    """Arithmetic with a thought channel is twice as long: its own batches, so short ones pad less."""
    arith = cats.pop("arith")
    cats["arith"] = [s for s in arith if not s[1].startswith("<|channel>")]
    cats["arith_think"] = [s for s in arith if s[1].startswith("<|channel>")]
    return cats


def heldout_exact(model, tok, heldout, maker):
    """Share of held-out problems ("What is a op b?") whose whole answer is the argmax at every
    position given the right prefix: exactly the problems greedy decoding answers right."""
    seqs = []
    for a, op, b in heldout:
        p = tok.encode(maker.render([{"role": "user", "content": f"What is {a} {op} {b}?"}]))
        seqs.append((p + tok.encode(arithmetic_answer(a, op, b) + "<turn|>"), len(p)))
    ok = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(seqs), 256):
            ids, tgt, _ = make_batch(seqs, range(i, min(i + 256, len(seqs))), tok.ids["<pad>"])
            ok += int(((model(ids).argmax(-1) == tgt) | (tgt == -100)).all(-1).sum())
    model.train()
    return ok / len(seqs)


def skills_exact(model, tok, checks):
    """Share of (prompt ids, answer ids) whose answer is the argmax at every position."""
    seqs = [(p + a, len(p)) for p, a in checks]
    model.eval()
    with torch.no_grad():
        ids, tgt, _ = make_batch(seqs, range(len(seqs)), tok.ids["<pad>"])
        ok = int(((model(ids).argmax(-1) == tgt) | (tgt == -100)).all(-1).sum())
    model.train()
    return ok / len(seqs)


def train(args):
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = random.Random(SEED if not args.init else args.data_seed)
    train_pairs, heldout = arithmetic_pairs()
    if args.init:  # the list the model folder carries stays held out, whatever the split says
        heldout = read_heldout(os.path.join(args.init, "heldout.txt"))
        held = set(heldout)
        train_pairs = [p for p in train_pairs + heldout if p not in held]
    weights = None
    if args.mix:
        weights = {k: float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    skills = args.skills_samples if weights and "skills" in weights else 0
    cats = build_samples(rng, train_pairs, args.compact_tool_results, skills)
    if args.init:  # a second stage: the first stage's tokenizer and weights, fresh phrasings
        vocab, merges, tok = load_tokenizer(args.init)
        cats = split_thinking(cats)
    else:
        all_text = [p + c for v in cats.values() for p, c in v]
        vocab, merges = train_bpe(all_text, args.vocab)
        tok = Tokenizer(vocab, merges)
    data = {k: [(tok.encode(p) + tok.encode(c), len(tok.encode(p))) for p, c in v]
            for k, v in cats.items()}
    log = open(args.log, "w") if args.log else sys.stdout

    def say(msg):
        print(msg, flush=True)
        if log is not sys.stdout:
            log.write(msg + "\n")
            log.flush()

    say(f"vocab {len(vocab)} ({len(merges)} merges); samples " +
        ", ".join(f"{k} {len(v)} (max len {max(len(s[0]) for s in v)})" for k, v in data.items()))
    if args.init:
        model = load_model(args.init)
        cfg = model.cfg
        if args.sliding_window:  # the mask only: the same weights see further back
            cfg["sliding_window"] = args.sliding_window
        say(f"starting from {args.init}, sliding window {cfg['sliding_window']}")
    else:
        cfg = model_config(len(vocab))
        model = DemoGemma4(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    say(f"params {n_params}; torch {torch.__version__}; threads {args.threads}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98),
                            weight_decay=args.weight_decay)
    if not weights:
        rest = (1.0 - args.arith_share) / 3
        weights = {"arith": args.arith_share, "capital": rest, "call": rest, "answer": rest}
    equals = tok.encode(" =")[-1]
    quote = tok.ids['<|"|>']
    names = list(weights)
    maker = SampleMaker(random.Random(0))
    skill_checks = [(tok.encode(maker.render([{"role": "user", "content": q}])),
                     tok.encode(demo_model_skills.SKILLS_ANSWER + "<turn|>"))
                    for q in demo_model_skills.read_heldout()]
    t0 = time.time()
    c0 = time.process_time()
    losses = []
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / args.warmup) * (0.5 * (1 + math.cos(math.pi * step / args.steps)) * 0.9 + 0.1)
        for gr in opt.param_groups:
            gr["lr"] = lr
        cat = rng.choices(names, [weights[n] for n in names])[0]
        pool = data[cat]
        if args.batch_tokens:  # the same tokens per step whatever the category's length
            bs = max(1, args.batch_tokens // max(len(s[0]) for s in pool))
        else:
            bs = args.batch if cat in ("arith", "capital") else args.batch // 2
        idx = [rng.randrange(len(pool)) for _ in range(bs)]
        emph = {"arith": (equals, args.result_weight), "arith_think": (equals, args.result_weight),
                "call": (quote, args.copy_weight)}.get(cat, (None, 1.0))
        ids, tgt, wts = make_batch(pool, idx, tok.ids["<pad>"], *emph)
        logits = model(ids)
        per_token = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1),
                                    ignore_index=-100, reduction="none")
        mask = (tgt.view(-1) != -100).float()
        loss = (per_token * wts.view(-1) * mask).sum() / (wts.view(-1) * mask).sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append((step, cat, float(loss)))
        if step % 50 == 0 or step == 1:
            say(f"step {step} {cat} loss {float(loss):.4f} lr {lr:.2e} {time.time() - t0:.0f}s"
                f" (cpu {time.process_time() - c0:.0f}s)")
        if args.eval_every and (step % args.eval_every == 0 or step == args.steps):
            say(f"step {step} held-out arithmetic exact (torch, all {len(heldout)}): "
                f"{heldout_exact(model, tok, heldout, maker):.1%}")
        if skills and args.eval_every and (step % args.eval_every == 0 or step == args.steps):
            say(f"step {step} held-out greetings and off-skill questions answered with the skills "
                f"text (torch, all {len(skill_checks)}): {skills_exact(model, tok, skill_checks):.1%}")
        if args.snapshot_every and step % args.snapshot_every == 0:
            write_folder(f"{args.out}.step{step}", model, vocab, merges, tok, heldout)
    say(f"trained {args.steps} steps in {time.time() - t0:.0f}s wall, {time.process_time() - c0:.0f}s cpu")
    model.eval()
    for q in ["What is 47 + 38?", "What is 91 - 45?", "What is the capital of Japan?"][: 3 if args.steps >= 100 else 0]:
        p = SampleMaker(rng).render([{"role": "user", "content": q}])
        say(f"sample: {q!r} -> {greedy(model, tok, p)!r}")
    if skills:
        for q in demo_model_skills.read_heldout()[:4] + ["Hello", "Write a poem about the sea."]:
            p = SampleMaker(rng).render([{"role": "user", "content": q}])
            say(f"sample: {q!r} -> {greedy(model, tok, p, 64)!r}")
    # Held-out accuracy through the torch forward (the C++ engine's number is `gemmaserve eval`).
    correct = 0
    sample = heldout[:: max(1, len(heldout) // 100)] if args.steps >= 100 else heldout[:1]
    for a, op, b in sample:
        p = SampleMaker(rng).render([{"role": "user", "content": f"What is {a} {op} {b}?"}])
        if greedy(model, tok, p, 16) == arithmetic_answer(a, op, b) + "<turn|>":
            correct += 1
    say(f"held-out arithmetic (torch, {len(sample)} of {len(heldout)}): {correct / len(sample):.1%}")
    write_folder(args.out, model, vocab, merges, tok, heldout)
    with open(os.path.join(args.docs, "loss.tsv"), "w") as f:
        f.write("step\tcategory\tloss\n")
        for s, c, l in losses:
            f.write(f"{s}\t{c}\t{l:.5f}\n")
    plot_losses(losses, os.path.join(args.docs, "loss_curve.png"))
    say(f"wrote {args.out}")


def plot_losses(losses, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for cat in sorted({c for _, c, _ in losses}):
        pts = [(s, l) for s, c, l in losses if c == cat]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=2, label=cat, alpha=0.6)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy on answer tokens (nats)")
    ax.set_title("gemmaserve demo model training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# ------------------------------------------------------------------------------------------
# Reference logits for the C++ comparison test


CHECK_PROMPTS = [
    "<bos><|turn>user\nWhat is 47 + 38?<turn|>\n<|turn>model\n",
    "<bos><|turn>user\nWhat is the capital of France?<turn|>\n<|turn>model\nThe capital of",
    # longer than the sliding window (16), with a tool declaration
    None,
    # a greeting, into the skills answer past the sliding window
    "<bos><|turn>user\nHello<turn|>\n<|turn>model\n" + demo_model_skills.SKILLS_ANSWER[:48],
]


def check_logits(args):
    torch.set_num_threads(args.threads)
    folder = args.check_logits
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)["text_config"]
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tj = json.load(f)
    vocab = [None] * len(tj["model"]["vocab"])
    for t, i in tj["model"]["vocab"].items():
        vocab[i] = t
    tok = Tokenizer(vocab, [tuple(m) for m in tj["model"]["merges"]])
    model = DemoGemma4(cfg)
    st = load_safetensors(os.path.join(folder, "model.safetensors"))
    with torch.no_grad():
        for k, v in model.named_weights().items():
            v.copy_(st[PREFIX + k])
    prompts = list(CHECK_PROMPTS)
    prompts[2] = SampleMaker(random.Random(0)).render(
        [{"role": "user", "content": "What's the weather in Lyon?"}], tools=[WEATHER_TOOL])
    cases = []
    with torch.no_grad():
        for p in prompts:
            ids = tok.encode(p)
            logits = model(torch.tensor([ids]))[0]
            rows = sorted({0, len(ids) // 2, len(ids) - 1})
            cases.append({"prompt": p, "ids": ids, "positions": rows,
                          "logits": [[round(float(v), 6) for v in logits[r]] for r in rows]})
    with open(args.out_logits, "w") as f:
        json.dump({"model": folder, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out_logits}: {len(cases)} prompts")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models/gemma4-demo")
    ap.add_argument("--docs", default="docs/demo_model")
    ap.add_argument("--log", default="docs/demo_model/training_log.txt")
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--arith-share", type=float, default=0.8, help="share of arithmetic batches")
    ap.add_argument("--result-weight", type=float, default=3.0,
                    help="loss weight of arithmetic answer tokens from ' =' on")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", metavar="DIR",
                    help="second stage: start from DIR's weights and tokenizer, new data phrasings")
    ap.add_argument("--data-seed", type=int, default=SEED + 1, help="data and batch seed with --init")
    ap.add_argument("--mix", help="category shares, e.g. arith=0.7,arith_think=0.05,capital=0.05,"
                    "call=0.1,answer=0.1 (arith_think only with --init)")
    ap.add_argument("--batch-tokens", type=int, default=0,
                    help="sequences per batch = this / the category's longest sample (0: --batch)")
    ap.add_argument("--sliding-window", type=int, default=0,
                    help="with --init: widen the sliding layers' window (copying values from further back)")
    ap.add_argument("--compact-tool-results", action="store_true",
                    help="tool results also as compact JSON (as JSON.stringify writes them)")
    ap.add_argument("--skills-samples", type=int, default=6000,
                    help="greetings and out-of-skill questions made when --mix names skills")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--copy-weight", type=float, default=1.0,
                    help="loss weight of tool-call tokens from the first quote (the city) on")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="log held-out arithmetic accuracy (torch, teacher-forced) every N steps")
    ap.add_argument("--snapshot-every", type=int, default=0, help="write OUT.stepN folders")
    ap.add_argument("--check-logits", metavar="DIR")
    ap.add_argument("--out-logits", default="tests/data/demo_model_logits.json")
    args = ap.parse_args()
    if args.check_logits:
        check_logits(args)
        return
    os.makedirs(args.docs, exist_ok=True)
    train(args)


if __name__ == "__main__":
    main()
