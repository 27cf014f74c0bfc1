"""Data: dataset loaders, the data rules' steps, and evaluation items with their distractors."""
