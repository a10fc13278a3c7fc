"""The model proxy: `POST /v1/responses` and `POST /v1/chat/completions`, the Model tier OpenAI-compatible.

For agents that bring their own loop: the official `openai` client works unchanged against the ingress. Token
ids, when the model gives them, stay on the items (and on the chat message) as extra fields. Errors come in
OpenAI's shape (`.errors`): 400 for a request the tier cannot take (a body whose fields do not have the
types the schema gives, named as `param`), 502 naming the failure kind when the model tier failed.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, RootModel, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from gym_serve.calls.handles import model_handle
from gym_serve.deployments.ingress.errors import OPENAI, IngressError, responses
from gym_serve.deployments.ingress.replica import Authorized, CurrentReplica, StrictJSON
from gym_serve.errors import FailureKind, failure_kind
from gym_serve.wire.chat import chat_request_to_responses, responses_response_to_chat
from gym_serve.wire.pieces import field_path
from gym_serve.wire.responses import Response, ResponseCreateParams, row_problems
from gym_serve.wire.tokens import TOKEN_FIELDS

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=[OPENAI], dependencies=[Authorized, StrictJSON])

PARAMS = "responses_create_params"

NO_STREAMING = (
    "`stream: true` is not supported: the model tier answers whole responses; send the request without `stream` "
    "(with the openai client: stream=False, the default)"
)


class ResponsesBody(RootModel[dict[str, Any]]):
    """A Responses create request (`input`, `tools`, sampling); what the tier does not use is ignored."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(ResponseCreateParams.__pydantic_core_schema__)


class ChatContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str = ""


class ChatCalled(BaseModel):
    name: str
    arguments: str = ""


class ChatToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = ""
    type: Literal["function"] = "function"
    function: ChatCalled


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[ChatContentPart] | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None


class ChatFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatTool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: ChatFunction


class ChatRequest(BaseModel):
    """A Chat Completions request: its schema, which the route holds a body to (strictly, as a row's fields are)."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatMessage]
    tools: list[ChatTool] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stream: bool | None = None


class ChatBody(RootModel[dict[str, Any]]):
    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(ChatRequest.__pydantic_core_schema__)


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    finish_reason: str


class ChatCompletion(BaseModel):
    """A Chat Completions answer; the message carries the token fields when the tier returns them."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "chat.completion"
    model: str
    choices: list[ChatChoice]
    usage: dict[str, int]


@router.post("/responses", responses={200: {"model": Response}, **responses(400, 401, 404, 413, 502, openai=True)})
async def create_response(replica: CurrentReplica, body: ResponsesBody) -> JSONResponse:
    app, request = replica.model_app(), body.root
    if "input" not in request:
        raise IngressError(400, "a Responses request needs `input`", field="input")
    for field, problem in row_problems({PARAMS: request})[:1]:  # the schema's types, as a row's are checked
        where = field.removeprefix(PARAMS).removeprefix(".") or None
        raise IngressError(400, f"`{where}`: {problem}" if where else problem, field=where)
    return JSONResponse(await _call(app, request))


@router.post(
    "/chat/completions",
    responses={200: {"model": ChatCompletion}, **responses(400, 401, 404, 413, 502, openai=True)},
)
async def create_chat_completion(replica: CurrentReplica, body: ChatBody) -> JSONResponse:
    app, request = replica.model_app(), body.root
    if not isinstance(request.get("messages"), list):
        raise IngressError(400, "a Chat Completions request needs `messages`", field="messages")
    try:
        ChatRequest.model_validate(request, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = field_path(first["loc"]) or None
        raise IngressError(400, f"`{where}`: {first['msg']}" if where else first["msg"], field=where) from None
    response = await _call(app, chat_request_to_responses(request), stream=request.get("stream"))
    completion = responses_response_to_chat(response)
    last = response["output"][-1] if response.get("output") else {}
    completion["choices"][0]["message"].update({k: last[k] for k in TOKEN_FIELDS if k in last})
    return JSONResponse(completion)


async def _call(app: str, request: dict[str, Any], stream: Any = None) -> dict[str, Any]:
    """One call of the Model tier; a failure in OpenAI's shape (400 for bad input, else 502), not a traceback."""
    if stream or request.get("stream"):
        raise IngressError(400, NO_STREAMING, field="stream")
    try:
        answer: dict[str, Any] = await model_handle(app).responses.remote(request)
    except Exception as error:
        kind = failure_kind(error)
        cause = getattr(error, "cause", None)
        lines = str(cause if isinstance(cause, BaseException) else error).strip().splitlines()
        status = 400 if kind is FailureKind.BAD_INPUT else 502
        raise IngressError(
            status, f"the model tier failed ({kind.value}): {lines[-1] if lines else kind.value}"
        ) from error
    return answer
