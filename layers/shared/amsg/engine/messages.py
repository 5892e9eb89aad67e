"""The SQS message body of a claimed task, validated with pydantic (only run_task imports this)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amsg.engine.runner import TaskMessage
from amsg.observability import logger


class TaskMessageModel(BaseModel):
    """Validates the SQS body; a malformed message is a poison pill, never retried into the DLQ forever."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    user_id: str = Field(alias="userId", min_length=1)
    uuid: str = Field(min_length=1, max_length=256)
    claim_version: int = Field(alias="claimVersion", ge=1)
    next_send_at: str = Field(alias="nextSendAt", min_length=1)


def parse_task_message(body: str) -> TaskMessage | None:
    try:
        model = TaskMessageModel.model_validate_json(body)
    except ValidationError:
        logger.warning("malformed task message dropped")
        return None
    return TaskMessage(model.user_id, model.uuid, model.claim_version, model.next_send_at)
