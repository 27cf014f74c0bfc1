"""benchmark-illusion: do pruned LLMs lose knowledge, or only stop producing it?"""

__version__ = "0.1.0"
