// The console's link to the server: the session (docs/console.md#signing-in) and every API call.
//
// The API token is sent once, to POST /console/session, and never kept: the server answers an
// HttpOnly session cookie the page cannot read, and a CSRF token that this module keeps in memory
// only and sends as X-CSRF-Token on every request that changes something.

let session = null;
const listeners = new Set();

/** The signed-in session ({csrf, role, workspaces, name, expires_at}), or null. */
export function current() {
  return session;
}

/** Calls `fn(session)` whenever the session changes (sign-in, sign-out, expiry). */
export function onSession(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function setSession(s, why) {
  session = s;
  for (const fn of listeners) fn(s, why);
}

const RANK = { viewer: 0, operator: 1, admin: 2 };

/** Whether the session's role is at least `role`. */
export function can(role) {
  return session != null && RANK[session.role] >= RANK[role];
}

/** A failed API call: the HTTP status and the API's error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(resp) {
  let code = "http_" + resp.status;
  let message = resp.statusText || "request failed";
  try {
    const body = await resp.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch (e) {
    /* not JSON: keep the status line */
  }
  return new ApiError(resp.status, code, message);
}

function headers(method, extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (method !== "GET" && method !== "HEAD" && session) h["X-CSRF-Token"] = session.csrf;
  return h;
}

/** A raw request with the session cookie and the CSRF header; a 401 ends the session. */
export async function request(method, path, { body, headers: extra, signal } = {}) {
  const init = { method, credentials: "same-origin", headers: headers(method, extra), signal };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, init);
  if (resp.status === 401 && session) setSession(null, "Your session ended. Sign in again.");
  if (!resp.ok) throw await errorOf(resp);
  return resp;
}

/** A JSON request; answers the parsed body (null for an empty one). */
export async function api(method, path, body) {
  const resp = await request(method, path, { body });
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body === undefined ? {} : body);
export const del = (path) => api("DELETE", path);

/** Path of a computer's route: `c("c-1", "screens", bot, "url")`. */
export function c(id, ...rest) {
  return "/v1/computers/" + [id, ...rest].map(encodeURIComponent).join("/");
}

/** Opens a session with an API token; the token is not kept anywhere. */
export async function signIn(token) {
  const resp = await fetch("/console/session", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ token }),
  });
  if (!resp.ok) throw await errorOf(resp);
  setSession(await resp.json(), null);
}

/** The session of the cookie this browser holds, if any (on page load). */
export async function restore() {
  try {
    const resp = await fetch("/console/session", {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    setSession(resp.ok ? await resp.json() : null, null);
  } catch (e) {
    setSession(null, "The server did not answer.");
  }
}

/** Ends the session on the server and here. */
export async function signOut() {
  try {
    await request("DELETE", "/console/session");
  } finally {
    setSession(null, "Signed out.");
  }
}

/**
 * Uploads `file` with XHR (for its progress events): `onProgress(sent, total)`.
 * Resolves with the API's answer; rejects with an ApiError.
 */
export function upload(path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", path);
    xhr.withCredentials = true;
    xhr.setRequestHeader("X-CSRF-Token", session ? session.csrf : "");
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch (e) {
        /* not JSON */
      }
      if (xhr.status >= 200 && xhr.status < 300) return resolve(body);
      if (xhr.status === 401 && session) setSession(null, "Your session ended. Sign in again.");
      const err = (body && body.error) || {};
      reject(new ApiError(xhr.status, err.code || "http_" + xhr.status, err.message || "upload failed"));
    };
    xhr.onerror = () => reject(new ApiError(0, "network", "The upload was interrupted."));
    xhr.send(file);
  });
}
