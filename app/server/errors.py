"""The server's one error type: an HTTP status with OpenAI's JSON error body."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An HTTP error with an OpenAI-style JSON body."""

    def __init__(self, status: int, message: str, *, type: str | None = None,
                 code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}
