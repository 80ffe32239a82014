"""Authenticators: front-proxy request headers (mTLS), client certificates, bearer tokens."""

from __future__ import annotations

import datetime
import hashlib
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from metrics_adapter.auth.blocking import may_block
from metrics_adapter.auth.identity import ANONYMOUS, Credentials, UserInfo
from metrics_adapter.bounded_cache import (
    POINTER_BYTES,
    ByteBoundedLRU,
    estimate_nested,
    estimate_text,
)
from metrics_adapter.errors import AuthError, UnauthorizedError


class Authenticator(Protocol):
    """One way of authenticating; None means "no credentials of my kind"."""

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """Return the user, None when not applicable; raise UnauthorizedError when invalid."""
        ...


class TokenReviewer(Protocol):
    """Asks the cluster who a bearer token belongs to (TokenReview)."""

    def review(self, token: str) -> UserInfo | None:
        """The token's user, or None when the token is not valid."""
        ...


def load_ca_bundle(pem: bytes) -> list[x509.Certificate]:
    """Parse a PEM bundle of CA certificates."""
    return x509.load_pem_x509_certificates(pem)


_AGNOSTIC = Criticality.AGNOSTIC
_EE_POLICY = (
    ExtensionPolicy.webpki_defaults_ee()
    .may_be_present(x509.AuthorityKeyIdentifier, _AGNOSTIC, None)
    .may_be_present(x509.SubjectAlternativeName, _AGNOSTIC, None)
)
"""The Web PKI profile, less two extensions Go's verifier (kube-apiserver's) does not require
of a client certificate: an authority key identifier and a subject alternative name."""
_CA_POLICY = ExtensionPolicy.webpki_defaults_ca().may_be_present(
    x509.AuthorityKeyIdentifier, _AGNOSTIC, None
)
_ANY_USAGE_POLICY = ExtensionPolicy.permit_all()
"""Only to tell "ours, but not for client auth" from "not ours" (never to accept)."""
_MAX_CHAIN_DEPTH = 8


def _chain(
    cert: x509.Certificate,
    store: Store | None,
    at: datetime.datetime,
    ee_policy: ExtensionPolicy = _EE_POLICY,
) -> list[x509.Certificate] | None:
    """The chain `cert` -> a trusted CA valid at `at` (EKU clientAuth), or None."""
    if store is None:
        return None
    verifier = (
        PolicyBuilder()
        .store(store)
        .time(at)
        .max_chain_depth(_MAX_CHAIN_DEPTH)
        .extension_policies(ca_policy=_CA_POLICY, ee_policy=ee_policy)
        .build_client_verifier()
    )
    try:
        return list(verifier.verify(cert, []).chain)
    except VerificationError:
        return None


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


@dataclass(frozen=True, slots=True)
class _Peer:
    """A client certificate as far as authentication cares, checked against one CA set."""

    cn: str
    orgs: tuple[str, ...]
    client_auth: bool
    not_before: float
    not_after: float
    """The chain's validity: the latest start and earliest end of its certificates."""
    expiry: str


def _check_peer(der: bytes, store: Store | None, now: float) -> _Peer | None:
    """The peer if a CA of `store` issued it (through intermediates of the bundle, if any).

    `cryptography`'s verifier builds the chain and checks signatures, CA constraints, the EKU
    and validity at the request's time. A certificate that fails only on time or EKU is still
    ours: it is returned with its window and usage, so the caller refuses it with a 401 that
    says why, instead of ignoring it.
    """
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    at = datetime.datetime.fromtimestamp(now, datetime.UTC)
    chain = _chain(cert, store, at)
    client_auth = chain is not None
    if chain is None:
        # Not valid now or not for client auth? Verified at a time in the certificate's own
        # window, with any usage, it shows whether one of our CAs issued it at all.
        for when in (at, cert.not_valid_before_utc, cert.not_valid_after_utc):
            chain = _chain(cert, store, when, _ANY_USAGE_POLICY)
            if chain is not None:
                break
        if chain is None:
            return None
        client_auth = _client_auth_allowed(cert)
    not_before = max(c.not_valid_before_utc for c in chain)
    not_after = min(c.not_valid_after_utc for c in chain)
    orgs = tuple(
        str(o.value) for o in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )
    return _Peer(
        _common_name(cert),
        orgs,
        client_auth,
        not_before.timestamp(),
        not_after.timestamp(),
        f"{not_before:%Y-%m-%dT%H:%M:%SZ} - {not_after:%Y-%m-%dT%H:%M:%SZ}",
    )


def _client_auth_allowed(cert: x509.Certificate) -> bool:
    """Go's rule: no EKU extension allows any usage."""
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return (
        ExtendedKeyUsageOID.CLIENT_AUTH in eku or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in eku
    )


class _PeerChecker:
    """Client certificates of one CA set: parsed and verified once, valid-checked per request.

    A live or resumed TLS session outlives a certificate's expiry, so the handshake's own check
    is not enough.
    """

    _MAX = 256

    def __init__(self, cas: Sequence[x509.Certificate], clock: Callable[[], float]) -> None:
        self._store = Store(list(cas)) if cas else None
        self._clock = clock
        self._cache: dict[bytes, _Peer | None] = {}
        self._lock = threading.Lock()

    def update(self, cas: Sequence[x509.Certificate]) -> None:
        """Swap in a new CA set (cached verdicts are dropped)."""
        with self._lock:
            self._store = Store(list(cas)) if cas else None
            self._cache = {}

    def peer(self, der: bytes | None, what: str) -> _Peer | None:
        """The certificate if one of the CAs issued it (None otherwise).

        The chain is verified once per certificate (the first request's time); its window is
        checked again on every request.

        Raises:
            UnauthorizedError: it is outside its (or its CA's) validity period right now.
        """
        if not der:
            return None
        cache = self._cache
        if der in cache:
            peer = cache[der]
        else:
            peer = _check_peer(der, self._store, self._clock())
            with self._lock:
                if len(self._cache) >= self._MAX:
                    self._cache = {}
                self._cache[der] = peer
        if peer is None:
            return None
        now = self._clock()
        if not peer.not_before <= now <= peer.not_after:
            raise UnauthorizedError(
                f"{what}: x509: certificate has expired or is not yet valid (valid {peer.expiry})"
            )
        return peer


class RequestHeaderAuthenticator:
    """Trusts ``X-Remote-*`` headers only from a client certificate of the requestheader CA.

    The certificate must be issued by the requestheader CA, be valid now (checked on every
    request), allow client auth, and have its CN in ``allowed_names`` (any CN when the list
    is empty), exactly like kube-apiserver's ``--requestheader-*`` options. Headers are read
    as kube-apiserver reads them: the user is the first non-empty value of the first user
    header that has one, groups are every non-empty value line by line (never split on
    commas), extras every value of every ``<prefix><%-escaped key>`` header.
    """

    def __init__(
        self,
        cas: Sequence[x509.Certificate],
        allowed_names: Sequence[str] = (),
        username_headers: Sequence[str] = ("X-Remote-User",),
        group_headers: Sequence[str] = ("X-Remote-Group",),
        extra_prefixes: Sequence[str] = ("X-Remote-Extra-",),
        uid_headers: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._peers = _PeerChecker(cas, clock)
        self._allowed = frozenset(allowed_names)
        self._user_headers = [h.lower() for h in username_headers]
        self._group_headers = [h.lower() for h in group_headers]
        self._extra_prefixes = [p.lower() for p in extra_prefixes]
        self._uid_headers = [h.lower() for h in uid_headers]

    def update(self, cas: Sequence[x509.Certificate], allowed_names: Sequence[str]) -> None:
        """Swap in a new CA bundle and allowed names (the cluster rotated them)."""
        self._peers.update(cas)
        self._allowed = frozenset(allowed_names)

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """Authenticate a front-proxy request, or None when it is not one."""
        cert = self._peers.peer(credentials.peer_cert_der, "front-proxy certificate")
        if cert is None:
            return None
        if not cert.client_auth:
            raise UnauthorizedError("front-proxy certificate is not valid for client auth")
        if self._allowed and cert.cn not in self._allowed:
            raise UnauthorizedError(f"x509: subject with cn={cert.cn} is not in the allowed list")
        lists = credentials.header_lists
        name = _first_value(lists, self._user_headers)
        if not name:
            return None
        groups = tuple(v for h in self._group_headers for v in lists.get(h, ()) if v)
        extra: dict[str, tuple[str, ...]] = {}
        for prefix in self._extra_prefixes:
            for header, values in lists.items():
                if header.startswith(prefix):
                    key = _unescape_extra_key(header[len(prefix) :])
                    extra[key] = extra.get(key, ()) + tuple(values)
        uid = _first_value(lists, self._uid_headers)
        return UserInfo(name, groups, extra, uid)


def _first_value(lists: Mapping[str, tuple[str, ...]], headers: Sequence[str]) -> str:
    """Go's ``Header.Get`` over names: the first line of the first header whose first is set."""
    for h in headers:
        values = lists.get(h)
        if values and values[0]:
            return values[0]
    return ""


def _unescape_extra_key(encoded: str) -> str:
    """``url.PathUnescape``: a malformed escape keeps the key as sent."""
    if _BAD_ESCAPE_RE.search(encoded):
        return encoded
    return unquote(encoded)


_BAD_ESCAPE_RE = re.compile(r"%(?![0-9a-fA-F]{2})")


class ClientCertAuthenticator:
    """x509 client certificates of the client CA: user = CN, groups = O (kube-apiserver rule).

    Validity is checked on every request, not only at the handshake.
    """

    def __init__(
        self, cas: Sequence[x509.Certificate], clock: Callable[[], float] = time.time
    ) -> None:
        self._peers = _PeerChecker(cas, clock)

    def update(self, cas: Sequence[x509.Certificate]) -> None:
        """Swap in a new CA bundle."""
        self._peers.update(cas)

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """The certificate's user, or None without a certificate of this CA."""
        cert = self._peers.peer(credentials.peer_cert_der, "client certificate")
        if cert is None:
            return None
        if not cert.client_auth:
            raise UnauthorizedError("client certificate is not valid for client auth")
        return UserInfo(cert.cn, cert.orgs)


TOKEN_REVIEWS_MAX_BYTES = 4 << 20
"""The TokenReview cache's budget: some 5,600 answers of a user of one group (a 32-byte key,
~750 bytes estimated with the bookkeeping); beyond, the least recently used are reviewed
again."""


def user_bytes(user: UserInfo | None) -> int:
    """A `UserInfo`'s estimated bytes (its strings, the tuples holding them)."""
    if user is None:
        return 32
    extra = tuple(user.extra.items())
    return 128 + estimate_nested((user.name, user.uid, user.groups, extra))


class TokenReviewAuthenticator:
    """Bearer tokens checked with TokenReview, results cached for ``ttl`` seconds.

    The cache is keyed by the token's SHA-256 (the token itself is not kept), bounded in bytes
    (``max_bytes``: least recently used answers dropped first) and drops expired entries on
    every call, so nothing outlives its TTL by more than the time to the next request.
    """

    def __init__(
        self,
        reviewer: TokenReviewer,
        ttl: float,
        clock: Callable[[], float],
        max_bytes: int = TOKEN_REVIEWS_MAX_BYTES,
    ) -> None:
        self._reviewer = reviewer
        self._ttl = ttl
        self._clock = clock
        self._cache: ByteBoundedLRU[bytes, tuple[UserInfo | None]] = ByteBoundedLRU(
            max_bytes, clock
        )

    @property
    def cached(self) -> int:
        """Entries in the cache (none outlive their TTL past the next call)."""
        return len(self._cache)

    @property
    def cached_bytes(self) -> int:
        """The cache's estimated bytes (at most its budget)."""
        return self._cache.bytes

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """The token's user; None without a bearer token; UnauthorizedError when invalid."""
        now = self._clock()
        self._cache.expire()
        header = credentials.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        key = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).digest()
        hit = self._cache.get(key)
        if hit is not None:
            user: UserInfo | None = hit[0]
        else:
            may_block()
            try:
                user = self._reviewer.review(token.strip())
            except AuthError as e:
                raise UnauthorizedError("token review failed") from e
            size = estimate_text(key) + POINTER_BYTES + user_bytes(user)
            self._cache.put(key, (user,), size, expires_at=now + self._ttl)
        if user is None:
            raise UnauthorizedError("invalid bearer token")
        return user


class DelegatingAuthenticator:
    """Tries each authenticator in turn; the first user wins, else anonymous (or 401).

    Authenticated users get ``system:authenticated`` added, as kube-apiserver does.
    """

    def __init__(self, chain: Sequence[Authenticator], allow_anonymous: bool = True) -> None:
        self._chain = list(chain)
        self._allow_anonymous = allow_anonymous

    @property
    def needs_credentials(self) -> bool:
        """False when no method is configured (``--authentication none``)."""
        return bool(self._chain) or not self._allow_anonymous

    def authenticate(self, credentials: Credentials) -> UserInfo:
        """The request's user."""
        for authenticator in self._chain:
            user = authenticator.authenticate(credentials)
            if user is not None:
                if "system:authenticated" not in user.groups:
                    user = UserInfo(
                        user.name, (*user.groups, "system:authenticated"), user.extra, user.uid
                    )
                return user
        if not self._allow_anonymous:
            raise UnauthorizedError("no valid credentials in the request")
        return ANONYMOUS
