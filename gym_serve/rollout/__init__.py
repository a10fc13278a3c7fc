"""One episode: the agent loop, the replay model, and running both in this process. Imports no Ray."""
