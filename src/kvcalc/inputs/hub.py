"""The Hugging Face Hub: repo URLs, fetching a config, and the one table that turns Hub errors
into one-line SourceErrors."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvcalc.errors import KvcalcError, SourceError
from kvcalc.inputs.files import read_json_file

# --- Hub URLs -----------------------------------------------------------------------------------------

_HUB_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co", "www.hf.co"})
# First path segments of Hub URLs that are not model repos: other kinds of repo, and site pages.
_OTHER_REPO_KINDS = {"datasets": "a dataset", "spaces": "a Space", "buckets": "a storage bucket"}
_SITE_PAGES = frozenset(
    {"api", "blog", "chat", "collections", "docs", "enterprise", "join", "learn", "login", "models",
     "new", "organizations", "papers", "posts", "pricing", "search", "settings", "tasks"}
)  # fmt: skip
_URL_FORMS = "https://huggingface.co/ORG/NAME, optionally /tree/REVISION or /blob/REVISION/config.json"

_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}$")

# Seconds huggingface_hub waits for the Hub's answer to its metadata request (its own default is
# 10 s, followed by a second round of 5 retries over 23 s when no copy is cached). HF_HUB_ETAG_TIMEOUT,
# when set, wins.
HUB_ETAG_TIMEOUT = 5.0


def _hub_hosts() -> frozenset[str]:
    """huggingface.co and its aliases, plus the host of HF_ENDPOINT (a private Hub, a mirror)."""
    from urllib.parse import urlsplit

    endpoint = os.environ.get("HF_ENDPOINT", "")
    try:
        host = urlsplit(endpoint).hostname if endpoint else None
    except ValueError:
        host = None
    return _HUB_HOSTS | ({host.lower()} if host else set())


def parse_hub_url(model: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) for a Hugging Face model repo URL; None when MODEL is no URL.

    Accepts ``https://huggingface.co/ORG/NAME`` and its ``/tree/REV``, ``/blob/REV/config.json``
    and ``/resolve/REV/config.json`` forms, on huggingface.co or hf.co (or HF_ENDPOINT's host),
    with or without the scheme and a trailing slash. Any other URL is a SourceError.
    """
    from urllib.parse import unquote, urlsplit

    lowered = model.lower()
    bare_hub = any(lowered == host or lowered.startswith(f"{host}/") for host in _HUB_HOSTS)
    if "://" not in model and not bare_hub:
        return None
    try:
        parts = urlsplit(model if "://" in model else f"https://{model}")
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
    except ValueError:
        raise SourceError(f"MODEL {model} is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or host not in _hub_hosts():
        raise SourceError(f"MODEL {model} is not a Hugging Face URL: kvcalc reads model repos given as {_URL_FORMS}")
    # Split before unquoting: a revision such as refs/pr/1 arrives as one segment, refs%2Fpr%2F1.
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if segments and segments[0] in _OTHER_REPO_KINDS:
        raise SourceError(
            f"MODEL {model} is {_OTHER_REPO_KINDS[segments[0]]}, not a model: "
            f"kvcalc reads only model repos ({_URL_FORMS})"
        )
    if len(segments) < 2 or segments[0] in _SITE_PAGES:
        raise SourceError(f"MODEL {model} is not a model repo URL: give {_URL_FORMS}")
    repo_id, rest = f"{segments[0]}/{segments[1]}", segments[2:]
    if not rest:
        return repo_id, None
    view, rest = rest[0], rest[1:]
    if view not in ("tree", "blob", "resolve") or not rest:
        raise SourceError(f"MODEL {model} is a page of Hub repo {repo_id}, not the repo: give {_URL_FORMS}")
    # A pull request's revision is refs/pr/N; the Hub writes it unescaped in some links.
    taken = 3 if rest[0] == "refs" and len(rest) >= 3 else 1
    revision, inner = "/".join(rest[:taken]), rest[taken:]
    if view == "tree" and inner:
        raise SourceError(
            f"MODEL {model} is the folder {'/'.join(inner)} of Hub repo {repo_id}: "
            "kvcalc reads the repo's top-level config.json"
        )
    if view != "tree" and inner != ["config.json"]:
        raise SourceError(
            f"MODEL {model} is the file {'/'.join(inner) or '(none)'} of Hub repo {repo_id}, "
            "not its top-level config.json"
        )
    return repo_id, revision


def _merge_revision(model: str, from_url: str | None, given: str | None) -> str | None:
    if from_url is not None and given is not None and from_url != given:
        raise SourceError(f"MODEL {model} names revision {from_url!r} but --revision is {given!r}: give one of them")
    return from_url if from_url is not None else given


# --- the Hub ----------------------------------------------------------------------------------------


def fetch_hub_config(
    repo_id: str, *, revision: str | None = None, on_fetch: Callable[[str], None] | None = None
) -> Any:
    """Download (or read from the local cache) a repo's config.json with huggingface_hub.

    huggingface_hub honours ``HF_TOKEN``, ``HF_HOME`` / ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and
    ``HF_HUB_ETAG_TIMEOUT``; each way the fetch fails becomes one line that says what to do. An
    unreachable Hub fails after one attempt of at most HUB_ETAG_TIMEOUT seconds.
    """
    import logging

    from huggingface_hub import hf_hub_download

    at = f" at revision {revision}" if revision else ""
    if on_fetch is not None and _will_fetch(repo_id, revision, "config.json"):
        on_fetch(f"fetching config.json of {repo_id}{at} from the Hub...")
    timeout = _etag_timeout()
    # huggingface_hub logs each retry as a warning; kvcalc reports the outcome in one line.
    hub_logger = logging.getLogger("huggingface_hub")
    previous_level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        with _single_attempt():
            local = hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=timeout)
    except Exception as exc:
        raise config_error(exc, repo_id, revision, timeout=timeout, hint=_preset_hint(repo_id)) from None
    finally:
        hub_logger.setLevel(previous_level)
    try:
        return read_json_file(Path(str(local)))
    except SourceError as exc:  # name the repo, not the cache path
        raise SourceError(f"config.json of Hub repo {repo_id}: {exc}") from None


def _etag_timeout() -> float:
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_ETAG_TIMEOUT"):  # the user's choice, as huggingface_hub parsed it
        return float(constants.HF_HUB_ETAG_TIMEOUT)
    return HUB_ETAG_TIMEOUT


def _is_offline() -> bool:
    from huggingface_hub import constants

    check = getattr(constants, "is_offline_mode", None)
    return bool(check()) if callable(check) else bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _will_fetch(repo_id: str, revision: str | None, filename: str) -> bool:
    """Whether huggingface_hub is about to use the network: online, unless the revision is a commit
    hash whose file is already cached (huggingface_hub then returns the cached copy unasked)."""
    if _is_offline():
        return False
    if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
        from huggingface_hub import try_to_load_from_cache

        try:
            return not isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)
        except Exception:  # an invalid repo id: hf_hub_download will say so
            return True
    return True


_RETRY_SWITCHES = ("_DEFAULT_RETRY_ON_EXCEPTIONS", "_DEFAULT_RETRY_ON_STATUS_CODES")


@contextmanager
def _single_attempt() -> Iterator[None]:
    """Make hf_hub_download give up after its first metadata request when no copy is cached.

    When that request fails with a network error, a timeout or a 5xx and the file is not cached,
    huggingface_hub 1.x-2.x tries again with a 60 s timeout and 5 retries backing off 1+2+4+8+8 s:
    23 silent seconds with no network, minutes against a Hub that never answers. Which errors
    earn that second round is decided by these two module attributes (and nothing else reads them
    in file_download), so kvcalc empties them for the duration of its call. A version without
    them keeps its own behaviour. The lock keeps concurrent kvcalc calls from restoring them early.
    """
    from huggingface_hub import file_download

    if not all(hasattr(file_download, name) for name in _RETRY_SWITCHES):
        yield
        return
    with _RETRY_LOCK:
        saved = {name: getattr(file_download, name) for name in _RETRY_SWITCHES}
        try:
            for name in _RETRY_SWITCHES:
                setattr(file_download, name, ())
            yield
        finally:
            for name, value in saved.items():
                setattr(file_download, name, value)


_RETRY_LOCK = threading.Lock()


def _preset_hint(repo_id: str) -> str:
    """'; the bundled preset X describes REPO: kvcalc estimate X' when a preset has that hf_repo."""
    from kvcalc.inputs.presets import load_presets

    try:
        presets = load_presets()
    except KvcalcError:  # a broken installation must not hide the Hub error
        return ""
    key = repo_id.lower()  # the Hub treats repo ids case-insensitively
    for preset in presets.values():
        if preset.hf_repo.lower() == key:
            return f"; the bundled preset {preset.name} describes {preset.hf_repo}: kvcalc estimate {preset.name}"
    return ""


def _is_timeout(exc: BaseException | None) -> bool:
    # httpx's TimeoutException (huggingface_hub 1.x-2.x) or requests' Timeout (0.x), by name:
    # neither library is imported here just to classify an error.
    return exc is not None and any(cls.__name__ in ("TimeoutException", "Timeout") for cls in type(exc).__mro__)


def repo_refusal(exc: BaseException, repo_id: str, revision: str | None) -> SourceError | None:
    """The refusals every Hub read shares, in one line each: a gated or missing repo, a missing
    revision, a malformed id, refused (401) or denied (403) credentials; None for anything else."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, GatedRepoError):
        return SourceError(f"Hub repo {repo_id} is gated: accept its terms on the Hub, then set HF_TOKEN")
    if isinstance(exc, RepositoryNotFoundError):
        return SourceError(f"Hub repo {repo_id} not found (if it is private, set HF_TOKEN to a token that can read it)")
    if isinstance(exc, RevisionNotFoundError):
        return SourceError(f"Hub repo {repo_id} has no revision {revision or 'main'!r}")
    if isinstance(exc, HFValidationError):
        return SourceError(f"{repo_id!r} is not a valid Hugging Face repo id")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            return SourceError(f"the Hub refused the credentials for {repo_id}: check HF_TOKEN")
        if status == 403:
            return SourceError(f"the Hub denied access to {repo_id}{at} (HTTP 403): check HF_TOKEN's permissions")
    return None


def config_error(
    exc: BaseException, repo_id: str, revision: str | None, *, timeout: float | None = None, hint: str = ""
) -> SourceError:
    """One line that says what went wrong with the Hub and what to do about it.

    ``hint`` (a bundled preset for the repo) is added where the Hub could not be asked at all.
    """
    from huggingface_hub.errors import EntryNotFoundError, FileMetadataError, HfHubHTTPError, LocalEntryNotFoundError

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, LocalEntryNotFoundError):
        # Not cached, and the Hub did not serve it. When a server did answer, its answer is the
        # cause and says more than "offline"; a connection failure (or offline mode) means unreachable.
        cause = exc.__cause__
        if isinstance(cause, HfHubHTTPError | EntryNotFoundError):
            return config_error(cause, repo_id, revision, timeout=timeout, hint=hint)
        if isinstance(cause, FileMetadataError):  # a server answered, but not as a Hub does
            return SourceError(
                f"the Hub did not answer like a Hugging Face Hub for {repo_id}{at} "
                f"({cause.__class__.__name__}); check HF_ENDPOINT"
            )
        if _is_timeout(cause):
            waited = f" within {timeout:g} s (HF_HUB_ETAG_TIMEOUT)" if timeout is not None else ""
            return SourceError(
                f"Hub repo {repo_id}{at} is not in the local Hugging Face cache and the Hub did not answer"
                f"{waited}; try again later, or pass a local config.json{hint}"
            )
        return SourceError(
            f"Hub repo {repo_id}{at} is not in the local Hugging Face cache and the Hub cannot be "
            f"reached (offline or HF_HUB_OFFLINE=1); fetch it once online or pass a local config.json{hint}"
        )
    refused = repo_refusal(exc, repo_id, revision)
    if refused is not None:
        return refused
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id}{at} has no config.json")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        down = hint if status is not None and status >= 500 else ""  # the Hub is down: the preset still works
        return SourceError(f"could not fetch config.json of {repo_id}: the Hub answered HTTP {status}{down}")
    detail = " ".join(str(exc).split())  # hub messages span lines; kvcalc prints one
    return SourceError(f"could not fetch config.json of {repo_id}: {exc.__class__.__name__}: {detail}")


def weights_error(exc: BaseException, repo_id: str, revision: str | None) -> SourceError:
    """Like config_error, but about the safetensors weights, and always naming the way out."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        NotASafetensorsRepoError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        SafetensorsParsingError,
    )

    way_out = "give --weights SIZE"
    if isinstance(exc, GatedRepoError | RepositoryNotFoundError):
        return SourceError(f"{config_error(exc, repo_id, revision)}; or {way_out}")
    if isinstance(exc, NotASafetensorsRepoError):
        return SourceError(f"Hub repo {repo_id} has no safetensors weights to size: {way_out}")
    if isinstance(exc, SafetensorsParsingError):
        return SourceError(f"the safetensors headers of Hub repo {repo_id} cannot be parsed: {way_out}")
    if isinstance(exc, OfflineModeIsEnabled) or isinstance(getattr(exc, "__cause__", None), OfflineModeIsEnabled):
        return SourceError(f"the weights of Hub repo {repo_id} cannot be sized offline (HF_HUB_OFFLINE=1): {way_out}")
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id} lacks a safetensors file its index names: {way_out}")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        return SourceError(f"the Hub answered HTTP {status} for the weights of {repo_id}: {way_out}")
    detail = " ".join(str(exc).split())
    return SourceError(
        f"could not size the weights of Hub repo {repo_id} ({exc.__class__.__name__}: {detail}): {way_out}"
    )


def gguf_header_error(exc: BaseException, repo_id: str, filename: str, revision: str | None) -> SourceError:
    """One line for each way the Hub can refuse a GGUF header."""
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, OfflineModeIsEnabled):
        return SourceError(
            f"the GGUF header of {repo_id}:{filename} is read from the Hub, which HF_HUB_OFFLINE=1 forbids: "
            "go online, or download the file and give its local path"
        )
    refused = repo_refusal(exc, repo_id, revision)
    if refused is not None:
        return refused
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id}{at} has no file {filename}")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        return SourceError(f"could not read the GGUF header of {repo_id}:{filename}: the Hub answered HTTP {status}")
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"TimeoutException", "Timeout"}:
        return SourceError(f"the Hub did not answer for the GGUF header of {repo_id}:{filename}; try again later")
    if names & {"ConnectError", "ConnectionError", "NetworkError", "TransportError"}:
        return SourceError(
            f"the Hub cannot be reached for the GGUF header of {repo_id}:{filename}; "
            "go online, or download the file and give its local path"
        )
    detail = " ".join(str(exc).split())
    return SourceError(f"could not read the GGUF header of {repo_id}:{filename}: {exc.__class__.__name__}: {detail}")
