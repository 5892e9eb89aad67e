"""The one error catalogue: every HTTP-visible error code, its status and its reference message.

Domain and API code raise :class:`ApiError` (usually through :func:`api_error`); the HTTP layer turns it into
the reference envelope ``{success: false, error: {code, message, details?}}``. Store adapters raise the
small domain exceptions at the bottom of this module, which the API layer maps to codes.
"""

from __future__ import annotations

from typing import Any

from amsg.jsonio import JsonObject

# code -> (HTTP status, default message). Messages are the reference's (Chinese) texts.
CATALOGUE: dict[str, tuple[int, str]] = {
    # request plumbing
    "NOT_FOUND": (404, "Unknown route"),
    "INVALID_CLIENT_TOKEN": (401, "共享密钥无效或缺失"),
    "USER_ID_REQUIRED": (400, "缺少用户标识符"),
    "INVALID_USER_ID_FORMAT": (400, "X-User-Id 必须是 UUID v4 格式"),
    "ENCRYPTION_REQUIRED": (400, "请求体必须加密"),
    "UNSUPPORTED_ENCRYPTION_VERSION": (400, "加密版本不支持"),
    "INVALID_ENCRYPTED_PAYLOAD": (400, "加密数据格式错误"),
    "DECRYPTION_FAILED": (400, "请求体解密失败"),
    "INVALID_PAYLOAD_FORMAT": (400, "解密后的数据不是有效 JSON"),
    "REQUEST_BODY_TOO_LARGE": (413, "请求体过大"),
    "RESPONSE_TOO_LARGE": (413, "响应过大，请缩小查询范围"),
    "UNSUPPORTED_CONTENT_ENCODING": (415, "不支持的 Content-Encoding"),
    "INVALID_CONTENT_ENCODING": (400, "请求体压缩数据损坏"),
    "INTERNAL_ERROR": (500, "服务器内部错误"),
    # tasks
    "TASK_ID_REQUIRED": (400, "缺少任务ID"),
    "INVALID_PARAMETERS": (400, "缺少必需参数或参数格式错误"),
    "INVALID_MESSAGE_TYPE": (400, "消息类型无效"),
    "INVALID_TIMESTAMP": (400, "时间格式无效"),
    "PUSH_SUBSCRIPTION_NOT_ACCEPTED": (400, "任务不再接受 pushSubscription，请改用 PUT /push-subscription"),
    "INVALID_UPDATE_DATA": (400, "更新数据格式错误"),
    "TASK_PAYLOAD_TOO_LARGE": (400, "任务内容过大"),
    "TASK_NOT_FOUND": (404, "指定的任务不存在或已被删除"),
    "TASK_UUID_CONFLICT": (409, "任务 UUID 已存在，请使用新的 uuid 重新提交"),
    "PUSH_SUBSCRIPTION_MISSING": (409, "该用户还没有登记推送订阅，请先调用 PUT /push-subscription"),
    "CREDENTIAL_NOT_FOUND": (409, "引用的凭据不存在"),
    "TASK_ALREADY_COMPLETED": (409, "任务已完成或已失败，无法更新"),
    "UPDATE_CONFLICT": (409, "任务更新失败，任务可能已被修改或删除"),
    "TASK_IN_FLIGHT": (409, "这条任务正在投递，等这次发完再改排期"),
    "TASK_USES_CRED_REFS": (409, "该任务使用 credRefs 引用凭据，请更新凭据本身而不是任务"),
    "TASK_CREATE_FAILED": (500, "任务创建失败"),
    "MESSAGE_SEND_FAILED": (500, "消息发送失败"),
    "VAPID_CONFIG_ERROR": (500, "VAPID 配置缺失，无法发送即时消息"),
    "INSTANT_NOT_AVAILABLE": (501, "即时消息投递尚未启用"),
    # init / keys / config
    "INIT_FAILED": (500, "初始化失败"),
    "VAPID_NOT_CONFIGURED": (503, "VAPID 公钥未配置：请为本 Worker 设置 VAPID_PUBLIC_KEY"),
    # the multi-tenant line (docs/tenancy.md)
    "INVALID_JSON": (400, "请求体不是有效的 JSON"),
    "INVALID_REQUEST_BODY": (400, "请求体格式无效"),
    "INVALID_TENANT_ID": (400, "tenantId 必须是 UUID v4 格式"),
    "INVALID_DRIVER": (400, "driver 只能省略或为 dynamodb：本部署的租户数据存放在部署自己的表中"),
    "DATABASE_URL_NOT_SUPPORTED": (400, "本部署不接受 databaseUrl：租户数据存放在部署自己的表中"),
    "TENANT_ALREADY_INITIALIZED": (409, "tenantId 已存在，不能重复初始化"),
    "INVALID_INIT_AUTH": (401, "初始化鉴权失败"),
    "INVALID_TENANT_AUTH": (401, "租户令牌无效或已过期"),
    "TENANT_RATE_LIMITED": (429, "该租户请求过于频繁，请稍后重试"),  # with Retry-After (docs/tenancy.md)
    "TENANT_PENDING_LIMIT": (429, "该租户待发送的任务已达上限，请等待任务发送或取消后重试"),  # with Retry-After
    # push subscription
    "INVALID_PUSH_SUBSCRIPTION": (400, "subscription 必须是带非空 endpoint 的对象"),
    "INVALID_UPDATED_AT": (400, "updatedAt 必须是正整数"),
    "PUSH_SUBSCRIPTION_LOOKUP_FAILED": (503, "推送订阅读取失败，请稍后重试"),
    "PUSH_SUBSCRIPTION_NOT_SUPPORTED": (501, "当前存储不支持推送订阅"),
    # llm credentials
    "LLM_CREDENTIALS_LOOKUP_FAILED": (503, "凭据读取失败，请稍后重试"),
    "LLM_CREDENTIALS_LIMIT_EXCEEDED": (400, "单用户最多存 500 行凭据"),
    "LLM_CREDENTIALS_NOT_SUPPORTED": (501, "当前数据库适配器不支持用户级 LLM 凭据存储"),
    "LLM_CREDENTIALS_PREFIX_DELETE_NOT_SUPPORTED": (501, "当前存储不支持按前缀删除凭据"),
    # client state
    "INVALID_STATE_ENTRIES": (400, "entries 必须是非空数组"),
    "TOO_MANY_STATE_ENTRIES": (400, "单次最多写入 200 条状态"),
    "NAMESPACE_REQUIRED": (400, "必须提供 namespace 查询参数"),
    "INVALID_STATE_NAMESPACE": (400, "namespace 不能包含控制字符（\\u0000-\\u001f 为库内部保留）"),
    "INVALID_NAMESPACE_LIMIT": (400, "limit 必须是 1-200 的整数"),
    "CLIENT_STATE_NOT_SUPPORTED": (501, "当前数据库适配器不支持 client_state"),
    "CLIENT_STATE_NAMESPACE_DELETE_NOT_SUPPORTED": (501, "当前数据库适配器不支持按命名空间删除 client_state"),
    "CLIENT_STATE_NAMESPACES_NOT_SUPPORTED": (501, "当前数据库适配器不支持按命名空间统计 client_state"),
    # outbox
    "INVALID_OUTBOX_CURSOR": (400, "since 必须是非负整数（上一页响应里的 cursor）"),
    "INVALID_OUTBOX_LIMIT": (400, "limit 必须是 1-100 的整数"),
    "INVALID_OUTBOX_ACK": (400, "messageIds 必须是非空数组"),
    "TOO_MANY_OUTBOX_ACK_IDS": (400, "单次最多 ack 200 条"),
    "INVALID_OUTBOX_DELETE": (400, "请提供 messageIds 数组或 all: true（二选一）"),
    "TOO_MANY_OUTBOX_DELETE_IDS": (400, "单次最多删除 200 条消息"),
    "OUTBOX_NOT_SUPPORTED": (501, "当前数据库适配器不支持 message_outbox"),
    "OUTBOX_DELETE_NOT_SUPPORTED": (501, "当前数据库适配器不支持删除 message_outbox 行"),
    # delivery policy (quiet hours and caps; our own route, details.field names the offending field)
    "INVALID_DELIVERY_POLICY": (400, "投递策略必须是 {quietHours, caps} 对象"),
    "INVALID_QUIET_HOURS": (400, "quietHours 必须是 {start: HH:MM, end: HH:MM, tzId} 或 null"),
    "INVALID_DELIVERY_CAP": (400, "caps 的每一项必须是 {scope, max, windowMinutes}"),
    "DELIVERY_POLICY_LOOKUP_FAILED": (503, "投递策略读取失败，请稍后重试"),
    "DELIVERY_POLICY_NOT_SUPPORTED": (501, "当前存储不支持投递策略"),
    # cloud-data management
    "CLOUD_DATA_NOT_SUPPORTED": (501, "当前部署未启用云端管理"),
    "CLOUD_DATA_FAILED": (500, "云端管理请求失败；未能确认操作结果。"),
    "INVALID_PAYLOAD": (400, "请求数据格式错误"),
    "INVALID_CLOUD_FILTER": (400, "ownerType 与 ownerId 必须同时提供，type 必须是已知资源类型"),
    "INVALID_CLOUD_LIMIT": (400, "limit 必须是 1-200 的整数"),
    "INVALID_CLOUD_CURSOR": (400, "cursor 无效"),
    "CLOUD_CURSOR_EXPIRED": (409, "分页快照已过期或筛选条件已变化，请重新开始"),
    "CLOUD_RECORD_NOT_FOUND": (404, "云端管理记录不存在"),
    "INVALID_CLOUD_OWNER_ACTION": (400, "action 只能是 restore"),
    "CLOUD_OWNER_CHANGED": (500, "归属者状态已被并发修改，请重试"),
    "INVALID_CLEANUP_MODE": (400, "mode 必须是 purge 或 retire-owner"),
    "INVALID_CLEANUP_SELECTION": (400, "清理范围无效"),
    "INVALID_CLEANUP_OPERATION": (400, "planId 与 idempotencyKey（≤200 字符）必填"),
    "CLOUD_INVENTORY_INCOMPLETE": (409, "云端清单不完整，暂不能清理"),
    "CLOUD_RESOURCE_NOT_FOUND": (409, "部分资源不存在或不在所选范围内"),
    "IDEMPOTENCY_CONFLICT": (409, "该幂等键已用于另一个清理计划"),
    "CLOUD_PLAN_EXPIRED": (409, "清理计划已过期，请重新预览"),
    "CLOUD_PLAN_CHANGED": (409, "预览后数据已变化，请重新预览"),
    "CLOUD_CLEANUP_IN_PROGRESS": (409, "该归属者的停用清理仍在进行，暂不能恢复"),
    "CLOUD_RETIREMENT_NOT_CONFIRMED": (503, "归属者尚未确认停用；请保留本地角色并稍后重试，或查看清理操作记录"),
    "CLOUD_LEASE_LOST": (409, "清理操作正由另一处理者继续执行"),
}

# Cloud-owner guard violations on ordinary endpoints answer 409 {code, message} (the reference leaks them
# as 500; see docs/compatibility.md).
CLOUD_GUARD_CODES = frozenset(
    {
        "CLOUD_OWNER_RETIRED",
        "INVALID_CLOUD_OWNER",
        "INVALID_CLOUD_OWNER_GENERATION",
        "CLOUD_OWNER_IMMUTABLE",
        "CLOUD_CROSS_OWNER_WRITE",
        "CLOUD_RESOURCE_CHANGED",
        "CLOUD_GUARD_UNSUPPORTED",
    }
)


class ApiError(Exception):
    """An error with a documented code; becomes the reference error envelope."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}  # extra response headers (Retry-After of a 429)

    def body(self) -> JsonObject:
        error: JsonObject = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"success": False, "error": error}


def api_error(code: str, message: str | None = None, details: Any = None, status: int | None = None) -> ApiError:
    """Build an :class:`ApiError` from the catalogue, optionally overriding message, details or status."""
    default_status, default_message = CATALOGUE.get(code, (500, code))
    return ApiError(status or default_status, code, message or default_message, details)


def invalid_parameters(
    *, missing: list[str] | None = None, invalid: list[str] | None = None, message: str | None = None
) -> ApiError:
    details: JsonObject = {}
    if missing:
        details["missingFields"] = missing
    if invalid:
        details["invalidFields"] = invalid
    return api_error("INVALID_PARAMETERS", message, details or None)


def invalid_update(invalid: list[str], message: str | None = None) -> ApiError:
    return api_error("INVALID_UPDATE_DATA", message, {"invalidFields": invalid})


# ---------------------------------------------------------------------------------------------------------
# Store-level domain exceptions (adapters raise these; the API layer maps them to codes)


class StoreError(Exception):
    """Base for adapter failures the domain understands."""


class TaskUuidConflict(StoreError):
    """A task with this uuid already exists somewhere in the deployment."""


class TenantPendingLimit(StoreError):
    """A task create found its tenant at its pending-task limit (docs/tenancy.md, limits)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the tenant has {limit} pending task(s), its limit")
        self.limit = limit


class ClaimLost(StoreError):
    """A write fenced by a task claim found the claim gone (the task was cancelled, settled or taken over)."""


class StoreUnavailable(StoreError):
    """A read or write could not be completed (throttled after retries, endpoint down, ...)."""


class PartialWriteError(StoreError):
    """A write split into several DynamoDB transactions failed after some of them committed (see docs/compatibility.md).

    ``applied`` lists the indexes (into the caller's entries) whose outcome is final; ``cause`` is the failure of
    the part that did not commit. The HTTP layer answers that failure's status with ``details.appliedEntries``.
    """

    def __init__(self, applied: list[int], cause: BaseException) -> None:
        super().__init__(f"partially applied ({len(applied)} entries committed): {type(cause).__name__}")
        self.applied = applied
        self.cause = cause


class CloudGuardError(StoreError):
    """A cloud-owner guard rejected a write; ``code`` is one of :data:`CLOUD_GUARD_CODES`."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class LeaseLost(StoreError):
    """A write fenced by a management record's lease found another token (or an expired lease): the worker
    that lost it must stop without writing anything else."""


class OwnerChanged(StoreError):
    """A compare-and-set on a cloud-data owner found another generation (someone retired or restored it)."""
