"""Authenticators: front-proxy request headers (mTLS), client certificates, bearer tokens."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from metrics_adapter.auth.identity import ANONYMOUS, Credentials, UserInfo
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


def _issued_by(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, Exception):
            continue
    return False


def _client_auth_allowed(cert: x509.Certificate) -> bool:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return (
        ExtendedKeyUsageOID.CLIENT_AUTH in eku or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in eku
    )


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _load_peer(der: bytes | None) -> x509.Certificate | None:
    if not der:
        return None
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        return None


class RequestHeaderAuthenticator:
    """Trusts ``X-Remote-*`` headers only from a client certificate of the requestheader CA.

    The TLS layer has already verified the chain and validity; this checks that the
    certificate was issued by the requestheader CA, allows client auth, and that its CN is in
    ``allowed_names`` (any CN when the list is empty), exactly like kube-apiserver's
    ``--requestheader-*`` options.
    """

    def __init__(
        self,
        cas: Sequence[x509.Certificate],
        allowed_names: Sequence[str] = (),
        username_headers: Sequence[str] = ("X-Remote-User",),
        group_headers: Sequence[str] = ("X-Remote-Group",),
        extra_prefixes: Sequence[str] = ("X-Remote-Extra-",),
        uid_headers: Sequence[str] = (),
    ) -> None:
        self._cas = list(cas)
        self._allowed = frozenset(allowed_names)
        self._user_headers = [h.lower() for h in username_headers]
        self._group_headers = [h.lower() for h in group_headers]
        self._extra_prefixes = [p.lower() for p in extra_prefixes]
        self._uid_headers = [h.lower() for h in uid_headers]

    def update(self, cas: Sequence[x509.Certificate], allowed_names: Sequence[str]) -> None:
        """Swap in a new CA bundle and allowed names (the cluster rotated them)."""
        self._cas = list(cas)
        self._allowed = frozenset(allowed_names)

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """Authenticate a front-proxy request, or None when it is not one."""
        cert = _load_peer(credentials.peer_cert_der)
        if cert is None or not _issued_by(cert, self._cas):
            return None
        if not _client_auth_allowed(cert):
            raise UnauthorizedError("front-proxy certificate is not valid for client auth")
        cn = _common_name(cert)
        if self._allowed and cn not in self._allowed:
            raise UnauthorizedError(f"x509: subject with cn={cn} is not in the allowed list")
        lists = {k.lower(): v for k, v in credentials.header_lists.items()}
        name = next((v for h in self._user_headers for v in lists.get(h, ()) if v), "")
        if not name:
            return None
        groups = tuple(v for h in self._group_headers for v in lists.get(h, ()))
        extra: dict[str, tuple[str, ...]] = {}
        for header, values in lists.items():
            for prefix in self._extra_prefixes:
                if header.startswith(prefix) and len(header) > len(prefix):
                    key = unquote(header[len(prefix) :]).lower()
                    extra[key] = extra.get(key, ()) + tuple(values)
        uid = next((v for h in self._uid_headers for v in lists.get(h, ()) if v), "")
        return UserInfo(name, groups, extra, uid)


class ClientCertAuthenticator:
    """x509 client certificates of the client CA: user = CN, groups = O (kube-apiserver rule)."""

    def __init__(self, cas: Sequence[x509.Certificate]) -> None:
        self._cas = list(cas)

    def update(self, cas: Sequence[x509.Certificate]) -> None:
        """Swap in a new CA bundle."""
        self._cas = list(cas)

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """The certificate's user, or None without a certificate of this CA."""
        cert = _load_peer(credentials.peer_cert_der)
        if cert is None or not _issued_by(cert, self._cas):
            return None
        if not _client_auth_allowed(cert):
            raise UnauthorizedError("client certificate is not valid for client auth")
        orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return UserInfo(_common_name(cert), tuple(str(o.value) for o in orgs))


class TokenReviewAuthenticator:
    """Bearer tokens checked with TokenReview, results cached for ``ttl`` seconds."""

    def __init__(
        self,
        reviewer: TokenReviewer,
        ttl: float,
        clock: Callable[[], float],
        max_entries: int = 10_000,
    ) -> None:
        self._reviewer = reviewer
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[float, UserInfo | None]] = OrderedDict()
        self._lock = threading.Lock()

    def authenticate(self, credentials: Credentials) -> UserInfo | None:
        """The token's user; None without a bearer token; UnauthorizedError when invalid."""
        header = credentials.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        now = self._clock()
        with self._lock:
            hit = self._cache.get(token)
        if hit is not None and hit[0] > now:
            user = hit[1]
        else:
            try:
                user = self._reviewer.review(token)
            except AuthError as e:
                raise UnauthorizedError("token review failed") from e
            with self._lock:
                self._cache[token] = (now + self._ttl, user)
                self._cache.move_to_end(token)
                while len(self._cache) > self._max:
                    self._cache.popitem(last=False)
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
