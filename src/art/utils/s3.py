"""ART's `art.utils.s3`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.s3 import ExcludableOption as ExcludableOption
    from arthex.utils.s3 import S3SyncError as S3SyncError
    from arthex.utils.s3 import archive_and_presign_step_url as archive_and_presign_step_url
    from arthex.utils.s3 import build_s3_path as build_s3_path
    from arthex.utils.s3 import build_s3_zipped_step_path as build_s3_zipped_step_path
    from arthex.utils.s3 import ensure_bucket_exists as ensure_bucket_exists
    from arthex.utils.s3 import pull_model_from_s3 as pull_model_from_s3
    from arthex.utils.s3 import push_model_to_s3 as push_model_to_s3
    from arthex.utils.s3 import s3_sync as s3_sync

    __all__ = [
        "ExcludableOption",
        "S3SyncError",
        "archive_and_presign_step_url",
        "build_s3_path",
        "build_s3_zipped_step_path",
        "ensure_bucket_exists",
        "pull_model_from_s3",
        "push_model_to_s3",
        "s3_sync",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
