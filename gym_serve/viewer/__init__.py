"""The rollout viewer (`gym-serve view`): an index of a rollout file and the web pages that show it."""
