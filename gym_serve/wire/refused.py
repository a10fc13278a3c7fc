"""`Refused`: a harness's request asks what the model tier cannot do (the gateway answers it in the API's shape)."""

from __future__ import annotations

__all__ = ["Refused"]


class Refused(ValueError):
    """Raised when a request asks what the model tier cannot honour; `field` names the part of the body.

    >>> error = Refused("n", "this gateway samples one choice per call")
    >>> error.field, str(error)
    ('n', '`n`: this gateway samples one choice per call')
    """

    def __init__(self, field: str, message: str, *, status: int = 400) -> None:
        super().__init__(f"`{field}`: {message}")
        self.field = field
        self.message = message
        self.status = status
