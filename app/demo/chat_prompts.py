"""Everyday chat requests written by hand, for measuring the demo drafters.

None of them comes from the training prompt generator (``prompts.py``): no template, topic
list or given text of it was used, so a speedup measured on them is not one the drafter saw
the like of in training. Phrased the way people type into a chat box.
"""

from __future__ import annotations

CHAT_PROMPTS: tuple[str, ...] = (
    "My sourdough starter smells like nail polish remover. Is it ruined?",
    "What's a good way to remember people's names when I meet them?",
    "Can you suggest three things to do with kids on a rainy weekend?",
    "Why do cats knead blankets with their paws?",
    "How should I get ready for my first 10k run in six weeks?",
    "Write a short thank-you note to a neighbour who watered my plants while I was away.",
    "What is the difference between a virus and a bacterium?",
    "Give me some tips for keeping my desk tidy at work.",
    "How do noise-cancelling headphones actually work?",
    "I keep waking up at 3am. What could help me sleep through the night?",
    "What should I pack for a three-day hiking trip?",
    "Explain what a mortgage is to someone buying their first home.",
    "Why is the ocean salty but rivers are not?",
    "Suggest a simple vegetarian dinner I can cook in 20 minutes.",
    "How do I politely decline a meeting invitation from my manager?",
    "Tell me a few fun facts about octopuses.",
)


def chat_messages(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]
