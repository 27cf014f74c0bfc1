"""Concepts: the dense model's SAE, per-item concept activations, and competency gaps."""
