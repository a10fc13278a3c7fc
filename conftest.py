"""The Ray + Serve fixtures every test module here may use (`serve_instance`)."""

pytest_plugins = ["gym_serve.testing.fixtures"]
