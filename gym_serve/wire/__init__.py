"""The formats on the wire: Responses and Chat Completions items, Hermes tool-call text, token bundles,
JSONL files. Imports no Ray and nothing else of gym-serve but `errors`."""
