"""Hub errors as one plain sentence: what huggingface_hub, httpx and the OS raise, translated."""

from __future__ import annotations

from typing import Any

from app.errors import DraftPairError


class HubError(DraftPairError):
    """A plain-language download/search error."""


class DownloadCancelled(HubError):
    pass


def plain_error(exc: BaseException, repo_id: str = "") -> HubError:
    """Translate huggingface_hub / httpx / OS errors into one plain sentence."""
    if isinstance(exc, HubError):
        return exc
    from huggingface_hub import errors as hf_errors

    if isinstance(exc, hf_errors.LocalEntryNotFoundError) and exc.__cause__ is not None:
        return plain_error(exc.__cause__, repo_id)  # the Hub's real answer, not "not cached"
    what = repo_id or "this model"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hf_errors.GatedRepoError):
        return HubError(
            f"{what} is gated: accept its licence on the Hugging Face website, then log in "
            "(`hf auth login`) and try again."
        )
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return HubError(
            f"{what} was not found on the Hugging Face Hub, or it is private and you are not "
            "logged in with an account that can see it."
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return HubError(f"That version of {what} does not exist.")
    if isinstance(exc, hf_errors.RemoteEntryNotFoundError):
        return HubError(f"A file of {what} is missing on the Hub.")
    if status == 401:
        return HubError(
            f"The Hub refused access to {what}: log in with `hf auth login` and try again."
        )
    if status == 403:
        return HubError(f"Your Hugging Face token is not allowed to read {what}.")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return HubError(
            "Hugging Face offline mode is on (HF_HUB_OFFLINE), so nothing can be downloaded."
        )
    if isinstance(exc, hf_errors.LocalEntryNotFoundError):
        return HubError(
            "The Hugging Face Hub cannot be reached: check your internet connection and try again."
        )
    if isinstance(exc, hf_errors.HfHubHTTPError):
        return HubError(
            f"The Hugging Face Hub answered with an error ({status or 'unknown'}); try again later."
        )
    import importlib

    httpx: Any = None
    try:
        httpx = importlib.import_module("httpx2")  # what huggingface_hub uses
    except ImportError:  # pragma: no cover - older hubs use httpx or requests
        pass
    if httpx is not None:
        if isinstance(exc, httpx.ConnectError):
            return HubError(
                "The Hugging Face Hub cannot be reached: check your internet connection and try again."
            )
        if isinstance(exc, httpx.TimeoutException):
            return HubError("The Hugging Face Hub did not answer in time; try again.")
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.NetworkError)):
            return HubError(
                "The connection was lost during the download; run it again to resume (finished files are kept)."
            )
    if isinstance(exc, OSError):
        text = str(exc)
        if "Consistency check failed" in text:
            return HubError(
                "A file arrived incomplete (connection lost); run the download again to resume."
            )
        if getattr(exc, "errno", None) == 28 or "Not enough free disk space" in text:
            return HubError("There is not enough free disk space for this download.")
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return HubError(
                "The Hugging Face Hub cannot be reached: check your internet connection and try again."
            )
        return HubError(f"Download failed: {exc.strerror or text}.")
    from app.errors import technical_detail, user_message

    return HubError(f"Download failed: {user_message(exc)}", detail=technical_detail(exc))


def is_network_error(exc: BaseException) -> bool:
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        return isinstance(exc, (ConnectionError, TimeoutError))
    from huggingface_hub import errors as hf_errors

    if isinstance(exc, hf_errors.LocalEntryNotFoundError) and isinstance(
        exc.__cause__, httpx.TransportError
    ):
        return True
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return True
    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))
