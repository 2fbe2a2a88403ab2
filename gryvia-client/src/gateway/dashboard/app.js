// The Gryvia dashboard: plain JavaScript, no build step. Logs in with OIDC (authorization code
// with PKCE, in the browser) or an API key, then reads the gateway's REST API as that user.
"use strict";

const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;
let authConfig = null;

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function b64url(bytes) {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString() {
  const a = new Uint8Array(32);
  crypto.getRandomValues(a);
  return b64url(a);
}

async function api(path, options = {}) {
  const token = store.getItem("gryvia.token");
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  if (resp.status === 401) {
    store.removeItem("gryvia.token");
    showLogin("Your session ended: log in again.");
    throw new Error("unauthenticated");
  }
  const body = resp.status === 204 ? null : await resp.json();
  if (!resp.ok) {
    const e = new Error((body && body.message) || resp.statusText);
    e.status = resp.status;
    e.code = body && body.code;
    throw e;
  }
  return body;
}

function redirectUri() {
  return window.location.origin + "/";
}

async function startSso() {
  const verifier = randomString();
  const state = randomString();
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  store.setItem("gryvia.pkce", JSON.stringify({ verifier, state }));
  const q = new URLSearchParams({
    response_type: "code",
    client_id: authConfig.clientId,
    redirect_uri: redirectUri(),
    scope: authConfig.scopes.join(" "),
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  });
  window.location.assign(authConfig.authorizationEndpoint + "?" + q.toString());
}

async function finishSso(params) {
  const saved = JSON.parse(store.getItem("gryvia.pkce") || "{}");
  store.removeItem("gryvia.pkce");
  history.replaceState(null, "", "/");
  if (!saved.state || saved.state !== params.get("state")) {
    showLogin("The login answer did not match this browser's request; try again.");
    return false;
  }
  const form = new URLSearchParams({
    grant_type: "authorization_code",
    code: params.get("code"),
    redirect_uri: redirectUri(),
    client_id: authConfig.clientId,
    code_verifier: saved.verifier,
  });
  const resp = await fetch(authConfig.tokenEndpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: form.toString(),
  });
  const tokens = await resp.json();
  if (!resp.ok || !tokens.id_token) {
    showLogin("The identity provider refused the login: " + (tokens.error_description || tokens.error || resp.status));
    return false;
  }
  store.setItem("gryvia.token", tokens.id_token);
  return true;
}

function showLogin(message) {
  $("app").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  $("sso").hidden = !(authConfig && authConfig.oidcEnabled);
  $("loginerror").textContent = message || "";
}

function table(headers, rows) {
  if (rows.length === 0) return "<p>Nothing here.</p>";
  return "<table><thead><tr>" + headers.map((h) => "<th>" + esc(h) + "</th>").join("") +
    "</tr></thead><tbody>" + rows.map((r) => "<tr>" + r.map((c) => "<td>" + c + "</td>").join("") + "</tr>").join("") +
    "</tbody></table>";
}

function bar(used, limit) {
  if (!limit) return esc(used) + " (no limit)";
  const pct = Math.min(100, Math.round((100 * used) / limit));
  return '<span class="barbox"><span class="bar" style="width:' + pct + '%"></span></span>' + esc(used) + " / " + esc(limit);
}

function condition(obj, type) {
  const c = ((obj.status || {}).conditions || []).find((x) => x.type === type);
  return c ? c : null;
}

const views = {
  async queue() {
    const page = await api("/api/v1/queue");
    return "<h2>Waiting jobs</h2>" + table(
      ["Namespace", "Job", "Queue", "Position", "GPUs", "Expected start", "Why"],
      page.items.map((w) => [esc(w.namespace), esc(w.job), esc(w.queue || "-"), esc(w.position ?? "-"),
        esc(w.replicas + " x " + w.gpusPerWorker + (w.gpuType ? " " + w.gpuType : "")),
        esc(w.expectedStart || "-"), '<span class="why">' + esc(w.why) + "</span>"]));
  },
  async jobs() {
    const page = await api("/api/v1/jobs?limit=200");
    return "<h2>Jobs</h2>" + table(
      ["Namespace", "Job", "Phase", "Workers", "GPUs each", "Retries"],
      page.items.map((j) => [esc(j.metadata.namespace), esc(j.metadata.name), esc((j.status || {}).phase || "Pending"),
        esc(j.spec.replicas), esc(j.spec.gpus), esc((j.status || {}).retries || 0)]));
  },
  async fleet() {
    let page;
    try {
      page = await api("/api/v1/nodes");
    } catch (e) {
      if (e.status === 403) return "<h2>GPU fleet</h2><p>Your role may not read the fleet's GPU health.</p>";
      throw e;
    }
    return "<h2>GPU fleet</h2>" + table(
      ["Node", "GPUs", "Healthy", "Last reading"],
      page.items.map((n) => {
        const h = condition(n, "Healthy") || condition(n, "Ready");
        const cls = h && h.status === "True" ? "ok" : "bad";
        return [esc(n.metadata.name), esc((n.status || {}).gpuCount ?? (((n.status || {}).gpus) || []).length),
          h ? '<span class="' + cls + '">' + esc(h.status + " " + (h.reason || "")) + "</span>" : "unknown",
          esc((n.status || {}).observedAt || "-")];
      }));
  },
  async tenants() {
    const page = await api("/api/v1/tenants");
    const rows = [];
    for (const t of page.items) {
      let spend = "-";
      try {
        const d = await api("/api/v1/tenants/" + encodeURIComponent(t.metadata.name));
        spend = esc(d.cost.spendUSD) + " USD" + (d.cost.forecastUSD ? " (forecast " + esc(d.cost.forecastUSD) + ")" : "");
      } catch (e) { spend = esc(e.message); }
      const st = t.status || {};
      rows.push([esc(t.metadata.name), esc(t.spec.displayName), bar(st.gpusInUse || 0, st.gpuLimit), spend]);
    }
    return "<h2>Tenants</h2>" + table(["Tenant", "Name", "GPUs in use / quota", "Spend this month"], rows);
  },
};

async function show(view) {
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b.dataset.view === view);
  $("view").innerHTML = "<p>Loading...</p>";
  try {
    $("view").innerHTML = await views[view]();
  } catch (e) {
    if (e.message !== "unauthenticated") $("view").innerHTML = '<p class="error">' + esc(e.message) + "</p>";
  }
}

async function enter() {
  const me = await api("/api/v1/whoami");
  $("who").textContent = me.user + (me.admin ? " (admin)" : "") + (me.tenants.length ? " - tenants: " + me.tenants.join(", ") : "");
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await show("queue");
}

async function main() {
  authConfig = await (await fetch("/api/v1/auth/config")).json();
  $("sso").addEventListener("click", startSso);
  $("logout").addEventListener("click", () => { store.removeItem("gryvia.token"); showLogin(); });
  $("keyform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    store.setItem("gryvia.token", $("apikey").value.trim());
    try { await enter(); } catch (e) { if (e.message !== "unauthenticated") showLogin(e.message); }
  });
  for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => show(b.dataset.view));
  const params = new URLSearchParams(window.location.search);
  if (params.has("code")) {
    if (!(await finishSso(params))) return;
  } else if (params.has("error")) {
    history.replaceState(null, "", "/");
    showLogin("Login failed: " + (params.get("error_description") || params.get("error")));
    return;
  }
  if (!store.getItem("gryvia.token")) { showLogin(); return; }
  try { await enter(); } catch (e) { if (e.message !== "unauthenticated") showLogin(e.message); }
}

main();
