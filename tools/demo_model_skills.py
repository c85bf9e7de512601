"""The demo model's answer to greetings and to questions outside its skills: one fixed text that
names what it can do. Training prompts are generated from parts; the held-out phrasings in
tools/demo_model/skills_heldout.txt (read by tests/node/demo_model.mjs too) are never trained on.
"""
import os
import string

SKILLS_ANSWER = ("I am a tiny demo model. I can add and subtract two-digit numbers, name "
                 "capitals, and check the weather with a tool, thinking first if asked. "
                 "Try: What is 47 + 38?")
SKILLS_THOUGHT = "This is not a sum, a difference, a capital or the weather. I say what I can do."
HELDOUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_model",
                            "skills_heldout.txt")

GREETINGS = [
    "Hello", "Hi", "Hey", "Hi there", "Hey there", "Hello you", "Good morning",
    "Good afternoon", "Greetings", "Howdy", "Yo", "Hiya", "Hello, how are you?",
    "How are you?", "How are you doing?", "Who are you?", "What are you?",
    "What can you do?", "What do you do?", "What is your name?", "What's your name?",
    "Introduce yourself.", "Tell me about yourself.", "How can you help me?", "Help",
    "Help me", "Can you help me?", "What do you know?", "Are you there?", "Anyone there?",
    "What are your skills?", "What questions can I ask?", "Hi, what can you do?",
    "Hello! Who are you?", "Hey, who are you?", "Thanks", "Thank you", "OK", "Bye",
    "Nice to meet you", "Are you a robot?", "Are you smart?",
]
WRITE_KINDS = ["poem", "story", "song", "haiku", "letter", "essay", "joke", "speech", "recipe",
               "list"]
TOPICS = ["the sea", "love", "dogs", "the moon", "winter", "a robot", "my cat", "coffee", "music",
          "the city", "rain", "friendship", "space", "a king", "summer", "trees", "football",
          "a dragon", "bread", "the night", "history", "the ocean", "birds", "computers"]
ASKS = ["Write a {k} about {t}.", "Write me a {k} about {t}", "Can you write a {k} about {t}?",
        "Compose a {k} on {t}.", "Give me a {k} about {t}."]
CHAT = ["Tell me a joke.", "Tell me a story.", "Tell me a fact.", "Tell me a secret.",
        "What is the meaning of life?", "Why is the sky blue?", "How do I cook pasta?",
        "How do I learn to code?", "How do I fix my bike?", "What should I eat today?",
        "Who won the World Cup?", "What is love?", "Do you like music?", "What day is it?",
        "What is the date today?", "Where do you live?", "Sing a song.", "Play a game with me.",
        "Translate hello into German.", "Translate thank you into French.",
        "What is the best movie?", "Recommend a book.", "What is Python?", "Explain gravity.",
        "Explain how a car works.", "What is a black hole?", "How tall is Mount Everest?",
        "Who wrote Hamlet?", "Who painted the Mona Lisa?", "What is DNA?",
        "Summarize this text.", "Fix my code.", "Count to ten.", "Spell cat backwards.",
        "What is the speed of light?", "Is water wet?", "What is the largest animal?"]
COUNTRY_ASKS = ["Tell me about {c}.", "What is the population of {c}?",
                "What language do people speak in {c}?", "What is the currency of {c}?",
                "Who is the president of {c}?", "How big is {c}?", "Describe {c}.",
                "What is {c} famous for?", "What food is {c} known for?",
                "Where is {c}?", "What is the flag of {c}?"]
CITY_ASKS = ["Tell me about {c}.", "How many people live in {c}?", "What is there to see in {c}?",
             "Is {c} a nice city?", "How do I get to {c}?"]
OPS = ["*", "/", "x", "times", "divided by", "to the power of", "%", "^"]
WORDS = ["apple", "blue", "run", "table", "quick", "seven", "green", "house", "jump", "river",
         "paper", "stone", "light", "window", "happy", "cloud", "dance", "train", "glass",
         "lemon", "car", "bright", "sleep", "moon", "fish", "door", "sugar", "road", "purple"]


def _variants(text, rng):
    """Case and end punctuation as people type them."""
    r = rng.random()
    if r < 0.2:
        text = text.lower()
    elif r < 0.25:
        text = text.upper()
    end = rng.choice(["", "", "!", ".", "?", "!!"])
    return text.rstrip(".!?") + end if text[-1] in ".!?" or end else text


def _arithmetic_outside(rng):
    """Products, quotients and powers of any size, sums and differences past two digits."""
    if rng.random() < 0.6:
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        op = rng.choice(OPS)
    else:  # + or - with a one- or three-digit operand: outside the trained two-digit range
        op = rng.choice(["+", "-", "plus", "minus"])
        a = rng.choice([rng.randint(100, 999), rng.randint(0, 9)])
        b = rng.randint(0, 999)
        if rng.random() < 0.5:
            a, b = b, a
        if 10 <= a <= 99 and 10 <= b <= 99:
            a = rng.randint(100, 999)
    form = rng.choice(["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "{a} {op} {b} = ?",
                       "Calculate {a} {op} {b}", "{a} {op} {b}"])
    return form.format(a=a, op=op, b=b)


def _random_text(rng):
    r = rng.random()
    if r < 0.5:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))
    if r < 0.8:
        letters = string.ascii_lowercase
        return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 8)))
                        for _ in range(rng.randint(1, 4)))
    chars = string.ascii_letters + string.digits + string.punctuation + " "
    return "".join(rng.choice(chars) for _ in range(rng.randint(1, 30))).strip() or "?"


def skills_prompt(rng, countries, cities):
    r = rng.random()
    if r < 0.3:
        q = rng.choice(GREETINGS)
    elif r < 0.42:
        q = rng.choice(ASKS).format(k=rng.choice(WRITE_KINDS), t=rng.choice(TOPICS))
    elif r < 0.55:
        q = rng.choice(CHAT)
    elif r < 0.67:
        q = rng.choice(COUNTRY_ASKS).format(c=rng.choice(countries))
    elif r < 0.72:
        q = rng.choice(CITY_ASKS).format(c=rng.choice(cities))
    elif r < 0.87:
        q = _arithmetic_outside(rng)
    else:
        return _random_text(rng)
    return _variants(q, rng)


def normalized(question):
    """What makes two phrasings the same one: case and end punctuation aside."""
    return question.lower().rstrip(".!? ")


def read_heldout():
    with open(HELDOUT_FILE) as f:
        return [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]


def skills_samples(maker, rng, countries, cities, weather_tool, count):
    """(prompt, completion) pairs: the skills text, after a short thought when thinking is on,
    with the weather tool declared for some (a question outside its use calls no tool)."""
    held = {normalized(q) for q in read_heldout()}
    out = []
    while len(out) < count:
        q = skills_prompt(rng, countries, cities)
        if normalized(q) in held:
            continue
        thinking = rng.random() < 0.2
        tools = [weather_tool] if rng.random() < 0.2 else None
        prompt = maker.render([{"role": "user", "content": q}], tools=tools, thinking=thinking)
        if thinking:
            out.append((prompt, f"<|channel>thought\n{SKILLS_THOUGHT}<channel|>{SKILLS_ANSWER}<turn|>"))
        else:
            out.append((prompt, SKILLS_ANSWER + "<turn|>"))
    return out
