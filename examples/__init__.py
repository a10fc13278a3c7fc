"""Runnable examples: programs that use gym-serve from the outside (a trainer, over HTTP)."""
