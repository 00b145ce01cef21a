// The console (docs/console.md): sign-in, the computer list and a computer's view, routed by the
// URL's hash (`#/`, `#/c/<computer>`, `#/c/<computer>/<bot>`). Nothing secret ever goes in the
// URL, the page or local storage: the session is an HttpOnly cookie.
import { html, render, useEffect, useRef, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { ComputerList } from "./list.js";
import { ComputerView } from "./computer.js";
import { messageOf } from "./util.js";

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "c" && parts[1]) return { view: "computer", computer: parts[1], bot: parts[2] || null };
  return { view: "list" };
}

function useRoute() {
  const [route, setRoute] = useState(parseRoute());
  useEffect(() => {
    const on = () => setRoute(parseRoute());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

function SignIn({ notice }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const input = useRef(null);
  useEffect(() => input.current && input.current.focus(), []);
  const submit = async (e) => {
    e.preventDefault();
    const field = input.current;
    const token = field.value.trim();
    // The token leaves the page with this request and is not kept: clear the field at once.
    field.value = "";
    if (!token) {
      setError("Paste an API token.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      await server.signIn(token);
    } catch (err) {
      setError(err.status === 401 ? "That token was not accepted (wrong, revoked or expired)." : messageOf(err));
      setBusy(false);
      field.focus();
    }
  };
  return html`
    <main class="signin" id="main">
      <form class="card signin-card" method="post" action="/console/session" onSubmit=${submit} aria-describedby="signin-help">
        <h1>Rakazo console</h1>
        <p id="signin-help" class="muted">
          Sign in with an API token (<code>rakazo token create --role viewer</code>). The token opens a
          session and is not kept by this page.
        </p>
        ${notice && html`<p class="notice" role="status">${notice}</p>`}
        <label for="token">API token</label>
        <input id="token" name="token" type="password" ref=${input} autocomplete="off" spellcheck="false" required />
        ${error && html`<p class="error" role="alert">${error}</p>`}
        <button type="submit" class="primary" disabled=${busy}>${busy ? "Signing in…" : "Sign in"}</button>
      </form>
    </main>`;
}

function TopBar({ session }) {
  const [busy, setBusy] = useState(false);
  const out = async () => {
    setBusy(true);
    try {
      await server.signOut();
    } catch (e) {
      /* the session is gone here either way */
    }
  };
  const scope = session.workspaces ? session.workspaces.join(", ") : "all workspaces";
  return html`
    <header class="top">
      <a class="brand" href="#/">Rakazo console</a>
      <nav aria-label="Main"><a href="#/">Computers</a></nav>
      <span class="who" title=${"Workspaces: " + scope}>
        <span class="name">${session.name}</span>
        <span class=${"role role-" + session.role}>${session.role}</span>
      </span>
      <button type="button" class="quiet" onClick=${out} disabled=${busy}>Sign out</button>
    </header>`;
}

function App() {
  const [state, setState] = useState({ loading: true, session: null, notice: null });
  const route = useRoute();
  useEffect(() => {
    const off = server.onSession((s, why) => setState({ loading: false, session: s, notice: why || null }));
    server.restore();
    return off;
  }, []);
  useEffect(() => {
    document.title = route.view === "computer" ? route.computer + " · Rakazo console" : "Rakazo console";
  }, [route.view, route.computer]);
  if (state.loading) return html`<p class="boot">Loading the console…</p>`;
  if (!state.session) return html`<${SignIn} notice=${state.notice} />`;
  return html`
    <a class="skip" href="#main" onClick=${(e) => { e.preventDefault(); document.getElementById("main").focus(); }}>Skip to content</a>
    <${TopBar} session=${state.session} />
    <main id="main" tabindex="-1">
      ${route.view === "computer"
        ? html`<${ComputerView} key=${route.computer} id=${route.computer} bot=${route.bot} />`
        : html`<${ComputerList} session=${state.session} />`}
    </main>`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
