"""Varied chat prompts for distilling the demo draft from the demo target.

Prompts are built programmatically (topics x task types, given texts to rewrite, code to
explain, word problems, multi-turn chats) from a seeded generator, so the same index always
gives the same prompt. A fixed share is held out by hash and never used for training.
"""

from __future__ import annotations

import hashlib
import random

TOPICS = [
    "photosynthesis", "black holes", "the water cycle", "volcanoes", "earthquakes",
    "the immune system", "vaccines", "DNA", "climate change", "renewable energy",
    "solar panels", "wind turbines", "electric cars", "batteries", "the internet",
    "how email works", "encryption", "passwords", "machine learning", "neural networks",
    "databases", "cloud computing", "operating systems", "compilers", "the stock market",
    "inflation", "interest rates", "budgeting", "saving money", "credit cards",
    "the Roman Empire", "ancient Egypt", "the French Revolution", "World War II",
    "the printing press", "the Renaissance", "the industrial revolution", "democracy",
    "human rights", "the moon landing", "Mars", "the solar system", "gravity",
    "magnetism", "electricity", "light", "sound waves", "atoms", "chemical reactions",
    "acids and bases", "the periodic table", "evolution", "dinosaurs", "bees",
    "coral reefs", "rainforests", "deserts", "oceans", "rivers", "mountains",
    "the human heart", "the brain", "sleep", "exercise", "nutrition", "vitamins",
    "drinking water", "stress", "meditation", "friendship", "teamwork", "leadership",
    "public speaking", "time management", "learning a language", "reading habits",
    "writing essays", "job interviews", "writing a resume", "starting a small business",
    "marketing", "customer service", "cooking pasta", "baking bread", "making coffee",
    "growing tomatoes", "composting", "keeping houseplants alive", "caring for a dog",
    "training a cat", "birdwatching", "hiking", "camping", "cycling", "running a marathon",
    "swimming", "chess", "playing guitar", "learning piano", "painting with watercolors",
    "photography", "recycling", "plastic pollution", "air quality", "city parks",
    "public transport", "trains", "airplanes", "bridges", "skyscrapers", "the Eiffel Tower",
    "the Great Wall of China", "the Amazon river", "Antarctica", "the Sahara",
    "Japan", "Brazil", "Kenya", "Canada", "India", "Italian food", "tea", "chocolate",
    "honey", "cheese", "rice", "the history of money", "libraries", "museums",
    "video games", "social media", "smartphones", "robots", "3D printing", "drones",
    "GPS", "weather forecasts", "hurricanes", "snow", "rainbows", "the seasons",
    "time zones", "calendars", "clocks", "maps", "mathematics", "prime numbers",
    "fractions", "percentages", "probability", "statistics", "geometry", "algebra",
    "Python programming", "JavaScript", "HTML", "version control with git",
    "unit testing", "debugging", "recursion", "sorting algorithms", "binary search",
    "hash tables", "linked lists", "APIs", "web servers", "spreadsheets",
    "first aid", "fire safety", "road safety", "online privacy", "phishing emails",
    "volunteering", "moving to a new city", "planning a wedding", "birthday parties",
    "board games", "poetry", "novels", "movies", "music theory", "jazz", "opera",
    "architecture", "gardening", "knitting", "woodworking", "fishing", "sailing",
]

PEOPLE = [
    "a child", "a ten-year-old", "a high school student", "a beginner", "a busy parent",
    "my grandmother", "a new employee", "a software developer", "a nurse", "a farmer",
    "a teacher", "a tourist", "a small business owner", "a college student",
]

EXPLAIN = [
    "What is {t}?",
    "Explain {t} in simple terms.",
    "Explain {t} to {p}.",
    "Can you tell me about {t}?",
    "Why is {t} important?",
    "Give me a short overview of {t}.",
    "What are the main ideas behind {t}?",
    "How does {t} work?",
    "What are three interesting facts about {t}?",
    "What are the pros and cons of {t}?",
    "What is a common misconception about {t}?",
    "Describe the history of {t} in a few sentences.",
    "In one paragraph, what should {p} know about {t}?",
    "What questions should I ask to understand {t} better?",
]

HOWTO = [
    "How do I get started with {t}?",
    "Give me step-by-step instructions for getting better at {t}.",
    "What are some tips for {p} interested in {t}?",
    "List five practical tips about {t}.",
    "Make a simple plan for learning about {t} in one week.",
    "What mistakes do beginners make with {t}?",
    "Write a checklist related to {t}.",
    "What tools or resources do I need for {t}?",
]

LISTS = [
    "List 5 words related to {t}.",
    "Give me a list of 3 questions about {t} with answers.",
    "Name four famous examples connected to {t}.",
    "Write a short quiz with three questions about {t}.",
    "Give me 5 ideas for a school project about {t}.",
    "List the key terms someone should know about {t}, with a one-line definition each.",
]

CREATIVE = [
    "Write a short story about {t}.",
    "Write a short poem about {t}.",
    "Write a haiku about {t}.",
    "Tell me a short bedtime story for {p} that involves {t}.",
    "Write a funny short dialogue between two friends about {t}.",
    "Write a short story about {p} who discovers {t}.",
    "Write a limerick about {t}.",
    "Describe {t} as if you were a tour guide.",
    "Write a catchy slogan about {t}.",
    "Write the opening paragraph of a novel involving {t}.",
]

WRITING = [
    "Write a short email to my manager asking for a day off next Friday.",
    "Write a polite email to a customer apologizing for a late delivery.",
    "Write a thank-you note to a friend who helped me move.",
    "Write an email inviting my team to a meeting about {t}.",
    "Write a short blog post introduction about {t}.",
    "Write a product description for a new gadget related to {t}.",
    "Write a short speech for the opening of a club about {t}.",
    "Write a tweet about {t}.",
    "Write a cover letter opening for a job related to {t}.",
    "Write a short news report about a local event related to {t}.",
    "Write a short review of a book about {t}.",
    "Write a message to a neighbor asking them to water my plants while I am away.",
    "Write a reminder email about an upcoming deadline for a project on {t}.",
    "Draft a short announcement for a workshop about {t}.",
]

CODE_TASKS = [
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses a string.",
    "Write a Python function to compute the factorial of a number.",
    "Write a Python function that returns the largest number in a list.",
    "Write a Python function that counts the vowels in a string.",
    "Write a Python function that checks whether a word is a palindrome.",
    "Write a Python function that returns the Fibonacci numbers up to n.",
    "Write a Python function that removes duplicates from a list while keeping order.",
    "Write a Python function that converts Celsius to Fahrenheit.",
    "Write a Python function that sorts a list of dictionaries by a key.",
    "Write a Python function that counts how often each word appears in a text.",
    "Write a Python function that merges two sorted lists.",
    "Write a Python function that computes the average of a list of numbers.",
    "Write a Python class for a simple bank account with deposit and withdraw methods.",
    "Write a Python function that reads a text file and returns the number of lines.",
    "Write a Python function that checks if two strings are anagrams.",
    "Write a Python function that flattens a nested list.",
    "Write a Python function that implements binary search.",
    "Write a Python function that returns the greatest common divisor of two numbers.",
    "Write a JavaScript function that capitalizes the first letter of each word.",
    "Write a JavaScript function that sums an array of numbers.",
    "Write a SQL query that selects all customers from the city of Paris.",
    "Write a SQL query that counts the orders per customer.",
    "Write a bash command that counts the files in a directory.",
    "Write a simple HTML page with a title and a list of three items.",
    "Write a Python script that prints the multiplication table for 7.",
    "Write a Python function that validates an email address with a regular expression.",
    "Write a Python function that returns the n-th triangular number.",
    "Write a Python function that finds the second largest number in a list.",
    "Write a Python function that converts a list of words to uppercase.",
]

CODE_SNIPPETS = [
    "def add(a, b):\n    return a + b",
    "def is_even(n):\n    return n % 2 == 0",
    "def greet(name):\n    print('Hello, ' + name + '!')",
    "numbers = [1, 2, 3, 4, 5]\nsquares = [n * n for n in numbers]\nprint(squares)",
    "def find_max(items):\n    best = items[0]\n    for x in items:\n        if x > best:\n            best = x\n    return best",
    "def count_words(text):\n    return len(text.split())",
    "for i in range(1, 11):\n    if i % 3 == 0:\n        print('Fizz')\n    else:\n        print(i)",
    "def factorial(n):\n    if n == 0:\n        return 1\n    return n * factorial(n - 1)",
    "with open('data.txt') as f:\n    lines = f.readlines()\nprint(len(lines))",
    "class Dog:\n    def __init__(self, name):\n        self.name = name\n\n    def bark(self):\n        return self.name + ' says woof'",
    "def average(values):\n    return sum(values) / len(values)",
    "import random\n\ndef roll_die():\n    return random.randint(1, 6)",
    "def reverse_words(sentence):\n    return ' '.join(reversed(sentence.split()))",
    "total = 0\nfor price in [3.5, 2.0, 4.25]:\n    total += price\nprint(total)",
    "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32",
    "function double(x) {\n  return x * 2;\n}",
    "const names = ['Ann', 'Bob'];\nnames.forEach(n => console.log(n));",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY age;",
    "def safe_divide(a, b):\n    try:\n        return a / b\n    except ZeroDivisionError:\n        return None",
    "def unique(items):\n    seen = set()\n    out = []\n    for x in items:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out",
]

CODE_ON_SNIPPET = [
    "Explain what this code does:\n\n{c}",
    "Add a docstring to this function:\n\n{c}",
    "Add comments to this code:\n\n{c}",
    "Is there a bug in this code? If so, fix it.\n\n{c}",
    "How could I improve this code?\n\n{c}",
    "Rewrite this code to be more readable:\n\n{c}",
    "What is the output of this code?\n\n{c}",
    "Write a unit test for this code:\n\n{c}",
]

TEXTS = [
    "The meeting has been moved to Thursday afternoon because the main room is being painted.",
    "Our team finished the project two weeks early, and the client was very happy with the results.",
    "I went to the store to buy some milk, but they were closed, so I had to go to another one across town.",
    "The new park in the city center has a playground, a small lake and many benches for people to rest.",
    "Please remember to bring your own water bottle to the hike on Saturday, because there is no shop on the trail.",
    "The library will be closed next Monday for a public holiday and will open again on Tuesday morning.",
    "My brother started learning the guitar last year and now he plays in a small band with his friends.",
    "The weather forecast says it will rain all weekend, so the picnic has been postponed until next month.",
    "Scientists have discovered a new species of frog in the rainforest that can change its color at night.",
    "We are looking for a friendly and reliable person to help in our bakery on weekday mornings.",
    "The train was delayed by forty minutes because of a signal problem near the station.",
    "After years of hard work, she finally opened her own restaurant serving food from her home country.",
    "The company announced that it will plant a tree for every product sold during the month of April.",
    "Regular exercise helps people sleep better, feel less stressed and stay healthy as they get older.",
    "The museum's new exhibition shows old maps, coins and letters from the eighteenth century.",
    "Due to the high number of requests, our customer service team may take up to three days to reply.",
    "He forgot his umbrella at home and got completely wet on the way to the office.",
    "The school is organizing a charity run to raise money for new computers in the classroom.",
    "Cats sleep for most of the day and are usually most active in the early morning and evening.",
    "The recipe calls for two cups of flour, one egg, a pinch of salt and a little warm milk.",
    "It is important to back up your files regularly so that you do not lose your work if your computer breaks.",
    "The festival will feature live music, local food and games for children all weekend long.",
    "Our office will switch to a new email system next week, and everyone will receive a new password.",
    "The river flooded after three days of heavy rain, and several roads near the village were closed.",
    "Learning a new language takes time, but speaking a little every day makes a big difference.",
    "The cat sat upon the mat and watched the birds outside the window for hours.",
    "The quarterly report shows that sales grew by ten percent, mostly thanks to online orders.",
    "Volunteers cleaned the beach on Sunday morning and collected more than two hundred bags of trash.",
    "The bus to the airport leaves every thirty minutes from the main square in front of the town hall.",
    "Our neighbor's dog barks every time someone rings the doorbell, even late at night.",
]

TEXT_TASKS = [
    "Fix the spelling mistakes in this text:\n\n{x}",
    "Correct the typos and grammar in the following paragraph:\n\n{x}",
    "Rewrite this sentence in plain words: {s}",
    "Rewrite this text in a more formal tone:\n\n{s}",
    "Rewrite this text in a friendly, casual tone:\n\n{s}",
    "Summarize this text in one sentence:\n\n{s}",
    "Translate this text into simple English for a child:\n\n{s}",
    "Make this text shorter:\n\n{s}",
    "Turn this text into a bulleted list:\n\n{s}",
    "Paraphrase the following:\n\n{s}",
    "Rewrite this text without any typos:\n\n{x}",
    "Proofread this:\n\n{x}",
    "Write a title for this text:\n\n{s}",
    "What is the main idea of this text?\n\n{s}",
]

MATH = [
    "If a train travels {a} kilometers per hour for {b} hours, how far does it go?",
    "Tom has {a} apples and gives {b} to his friend. How many apples does he have left?",
    "A shirt costs {a} dollars and is on sale for {b} percent off. What is the sale price?",
    "What is {a} times {b}?",
    "What is {a} plus {b}, divided by 2?",
    "A rectangle is {a} meters long and {b} meters wide. What is its area and perimeter?",
    "Sara reads {b} pages a day. How many days does she need to read a book of {a} pages?",
    "If I save {b} dollars every week, how long will it take to save {a} dollars?",
    "A class has {a} students and {b} of them are absent. What percentage is present?",
    "Solve for x: x + {b} = {a}.",
    "What is the average of {a}, {b} and {c}?",
    "A recipe needs {b} eggs for 4 people. How many eggs are needed for {c} people?",
]

FOLLOWUPS = [
    "Can you make it shorter?",
    "Can you explain that in simpler words?",
    "Can you give me an example?",
    "Thanks! Can you summarize that in one sentence?",
    "Can you turn that into a list?",
    "Why is that?",
    "Can you add one more tip?",
    "Now write it as a short poem.",
]

CANNED_FIRST_REPLY = [
    "Sure! {T} is a broad topic. What would you like to know about it?",
    "Of course. Here is a short answer: {T} is something many people find interesting, "
    "and it has a long history.",
    "Happy to help with {t}. Let me know which part you are most curious about.",
]

SYSTEMS = [
    None, None, None, None, None, None,
    "You are a helpful assistant. Answer briefly.",
    "You are a friendly teacher who explains things clearly.",
    "You are a concise assistant. Use short sentences.",
]

HELDOUT_SHARE = 0.03


def _typos(text: str, rng: random.Random, rate: float = 0.12) -> str:
    words = text.split(" ")
    out = []
    for w in words:
        if len(w) > 3 and rng.random() < rate:
            i = rng.randrange(1, len(w) - 1)
            op = rng.randrange(4)
            if op == 0:
                w = w[:i] + w[i + 1 :]
            elif op == 1:
                w = w[:i] + w[i] + w[i:]
            elif op == 2 and i < len(w) - 1:
                w = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
            else:
                w = w[:i] + rng.choice("aeiourstn") + w[i + 1 :]
        out.append(w)
    return " ".join(out)


def _user_turn(rng: random.Random) -> tuple[str, str]:
    t = rng.choice(TOPICS)
    p = rng.choice(PEOPLE)
    kind = rng.choices(
        ["explain", "howto", "list", "creative", "writing", "code", "code_snip", "text", "math"],
        weights=[16, 10, 7, 12, 10, 9, 9, 14, 6],
    )[0]
    if kind == "explain":
        return kind, rng.choice(EXPLAIN).format(t=t, p=p)
    if kind == "howto":
        return kind, rng.choice(HOWTO).format(t=t, p=p)
    if kind == "list":
        return kind, rng.choice(LISTS).format(t=t, p=p)
    if kind == "creative":
        return kind, rng.choice(CREATIVE).format(t=t, p=p)
    if kind == "writing":
        return kind, rng.choice(WRITING).format(t=t, p=p)
    if kind == "code":
        return kind, rng.choice(CODE_TASKS)
    if kind == "code_snip":
        return kind, rng.choice(CODE_ON_SNIPPET).format(c=rng.choice(CODE_SNIPPETS))
    if kind == "text":
        n = rng.choice([1, 1, 2, 3])
        s = " ".join(rng.sample(TEXTS, n))
        return kind, rng.choice(TEXT_TASKS).format(s=s, x=_typos(s, rng))
    a, b, c = rng.randint(10, 500), rng.randint(2, 40), rng.randint(2, 12)
    return kind, rng.choice(MATH).format(a=a, b=b, c=c)


def make_prompt(index: int, seed: int = 0) -> dict:
    """Prompt number ``index``: {"id", "kind", "messages"} (no assistant reply at the end)."""
    rng = random.Random(f"{seed}:{index}")
    kind, user = _user_turn(rng)
    messages: list[dict] = []
    system = rng.choice(SYSTEMS)
    if system:
        messages.append({"role": "system", "content": system})
    if rng.random() < 0.08:  # multi-turn: a canned first exchange, then a follow-up
        t = rng.choice(TOPICS)
        messages.append({"role": "user", "content": f"Tell me about {t}."})
        reply = rng.choice(CANNED_FIRST_REPLY).format(t=t, T=t[:1].upper() + t[1:])
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": rng.choice(FOLLOWUPS)})
        kind = "multiturn"
    else:
        messages.append({"role": "user", "content": user})
    pid = f"{seed}-{index}"
    return {"id": pid, "kind": kind, "messages": messages}


def is_heldout(prompt: dict) -> bool:
    text = repr(prompt["messages"]).encode()
    h = int.from_bytes(hashlib.sha256(text).digest()[:8], "big") / 2**64
    return h < HELDOUT_SHARE


def prompt_stream(start: int = 0, seed: int = 0, heldout: bool = False):
    """Yield (index, prompt) from ``start`` on, training prompts (or held-out ones) only."""
    i = start
    while True:
        p = make_prompt(i, seed)
        if is_heldout(p) == heldout:
            yield i, p
        i += 1
