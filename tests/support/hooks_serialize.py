"""A hooks module for tests (AMSG_HOOKS_MODULE=tests.support.hooks_serialize): groups by ``metadata.group``."""


def serialize_by(task):
    metadata = task.get("metadata") or {}
    if metadata.get("explode"):
        raise RuntimeError("hook failure")
    return metadata.get("group")
