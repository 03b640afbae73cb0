//! What keeps a server without tokens to this machine's own programs.
//!
//! [`crate::check_listen`] keeps such a server on a loopback address, but a web page
//! the machine's browser shows can still send requests there: a form posted across
//! sites, a `fetch` in `no-cors` mode, or a DNS name the page's author points at
//! 127.0.0.1 after it loaded (DNS rebinding), which makes the browser treat the API
//! as the page's own origin. Without tokens nothing else stands in the way, so every
//! request must pass three checks:
//!
//! - `Host` names a loopback name or address: `localhost`, `127.0.0.0/8` or `[::1]`,
//!   with any port. A rebound name (`evil.example:8080`) answers 421
//!   `misdirected_request` naming `Host`.
//! - An `Origin`, when the browser sends one, is this server's: `http://` and the
//!   `Host`'s host and port. Another site's answers 403 `forbidden` naming `Origin`.
//! - A request that may change something (every method but GET, HEAD and OPTIONS)
//!   has `Content-Type: application/json`, with or without a body: a browser sends
//!   that type across sites only after a CORS preflight, which this server never
//!   grants, so no form post and no "simple" request reaches a state-changing route.
//!   Without it: 415 `unsupported_media_type` naming `Content-Type`.
//!
//! With tokens these checks are off: a browser never adds a bearer token by itself,
//! so a page cannot borrow one (no CSRF), and a rebound name reaches only routes that
//! want a token it does not have. Clients of a server with tokens are unchanged.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;

use crate::error::{ApiError, ErrorCode};
use crate::extract::is_json;

/// Middleware: the three checks of the module docs. Installed by the router only
/// when the server has no tokens.
pub async fn guard(request: Request, next: Next) -> Result<Response, ApiError> {
    check(request.method(), request.headers())?;
    Ok(next.run(request).await)
}

fn check(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let Some((name, port)) = split_authority(host).filter(|(name, _)| is_loopback(name)) else {
        return Err(ApiError::at(
            ErrorCode::MisdirectedRequest,
            "Host",
            format!(
                "{host:?} is not a loopback name or address; a server without tokens answers \
                 only localhost, 127.0.0.0/8 and [::1] (a web page that points its own name at \
                 this machine, DNS rebinding, is refused). Configure tokens to serve other names"
            ),
        ));
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let text = origin.to_str().unwrap_or_default();
        let same = text
            .strip_prefix("http://")
            .and_then(split_authority)
            .is_some_and(|(o_name, o_port)| {
                o_name.eq_ignore_ascii_case(name) && o_port.unwrap_or(80) == port.unwrap_or(80)
            });
        if !same {
            return Err(ApiError::at(
                ErrorCode::Forbidden,
                "Origin",
                format!(
                    "{text:?} is not this server (http://{host}); a server without tokens \
                     answers no other web site's pages"
                ),
            ));
        }
    }
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && !is_json(headers) {
        return Err(ApiError::at(
            ErrorCode::UnsupportedMediaType,
            "Content-Type",
            format!(
                "a {method} to a server without tokens needs `Content-Type: application/json`, \
                 even with no body (so no web page's form can send it)"
            ),
        ));
    }
    Ok(())
}

/// `host[:port]` or `[v6][:port]`: the host (brackets removed) and the port. `None`
/// for anything else (a path, user info, a bad port).
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        match after {
            "" => (name, None),
            _ => (name, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    (!name.is_empty()).then_some((name, port))
}

fn is_loopback(name: &str) -> bool {
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    // Only the dotted-quad and bracketed forms: `127.1` and `2130706433` are odd
    // spellings no browser sends as a Host.
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn loopback_hosts_pass_and_every_other_host_is_misdirected() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.8.9.10:1",
            "[::1]",
            "[::1]:8080",
        ] {
            let map = headers(&[("host", host)]);
            assert!(check(&Method::GET, &map).is_ok(), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io:8080",
            "10.0.0.1:8080",
            "[::2]:8080",
            "::1",
            "127.0.0.1:port",
            "127.0.0.1:99999",
            "",
        ] {
            let err = check(&Method::GET, &headers(&[("host", host)])).unwrap_err();
            assert_eq!(err.code, ErrorCode::MisdirectedRequest, "{host}");
            assert_eq!(err.field.as_deref(), Some("Host"));
        }
        let err = check(&Method::GET, &HeaderMap::new()).unwrap_err();
        assert_eq!(err.code, ErrorCode::MisdirectedRequest);
    }

    #[test]
    fn an_origin_must_be_this_server() {
        let json = ("content-type", "application/json");
        for (host, origin) in [
            ("127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("localhost", "http://localhost:80"),
            ("localhost:80", "http://LOCALHOST"),
            ("[::1]:9", "http://[::1]:9"),
        ] {
            let map = headers(&[("host", host), ("origin", origin), json]);
            assert!(check(&Method::POST, &map).is_ok(), "{host} {origin}");
        }
        for (host, origin) in [
            ("127.0.0.1:8080", "http://evil.example"),
            ("127.0.0.1:8080", "http://127.0.0.1:8081"),
            ("127.0.0.1:8080", "http://localhost:8080"),
            ("127.0.0.1:8080", "https://127.0.0.1:8080"),
            ("127.0.0.1:8080", "null"),
            ("127.0.0.1:8080", "http://127.0.0.1:8080.evil.example"),
        ] {
            let map = headers(&[("host", host), ("origin", origin), json]);
            let err = check(&Method::POST, &map).unwrap_err();
            assert_eq!(err.code, ErrorCode::Forbidden, "{origin}");
            assert_eq!(err.field.as_deref(), Some("Origin"));
        }
    }

    #[test]
    fn changes_need_the_json_content_type_and_reads_do_not() {
        let host = ("host", "127.0.0.1:8080");
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            for content_type in [
                None,
                Some("application/x-www-form-urlencoded"),
                Some("multipart/form-data; boundary=x"),
                Some("text/plain"),
            ] {
                let mut map = headers(&[host]);
                if let Some(ct) = content_type {
                    map.insert("content-type", HeaderValue::from_static(ct));
                }
                let err = check(&method, &map).unwrap_err();
                assert_eq!(
                    err.code,
                    ErrorCode::UnsupportedMediaType,
                    "{method} {content_type:?}"
                );
                assert_eq!(err.field.as_deref(), Some("Content-Type"));
            }
            let map = headers(&[host, ("content-type", "application/json")]);
            assert!(check(&method, &map).is_ok());
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(check(&method, &headers(&[host])).is_ok(), "{method}");
        }
    }
}
