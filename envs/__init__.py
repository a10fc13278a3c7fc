"""Environments: one package each, holding its tools, `verify`, example data and recordings."""
