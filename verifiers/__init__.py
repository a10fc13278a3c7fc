"""Reward functions as plain, unit-tested functions; imports nothing of gym-serve."""
