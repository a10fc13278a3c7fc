"""What the model kinds need beside their deployments: the synthetic model's costs, the tiny local model, the
HTTP client of the endpoint-backed kinds, and the client that pushes policy weights into the vLLM tier."""
