// What the service's pages share: building elements, asking the API with the page's token
// (each page holds it in `token`), and numbers as a person reads them. Served from the service
// itself, so the pages still load nothing from elsewhere.
"use strict";

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props || {});
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

/** GET `path` with the bearer token; an error reply throws its detail and status. */
async function api(path) {
  const reply = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (!reply.ok) {
    let detail = "HTTP " + reply.status;
    try { detail = (await reply.json()).detail || detail; } catch (e) { /* not JSON */ }
    const error = new Error(detail);
    error.status = reply.status;
    throw error;
  }
  return reply;
}

function number(v) {
  if (v === null || v === undefined) return "-";
  return Math.abs(v) >= 1000 ? Math.round(v).toLocaleString("en-US") : Number(v.toPrecision(4)).toString();
}

function hours(v) {
  return v >= 100 ? Math.round(v).toLocaleString("en-US") : Number((v || 0).toPrecision(3)).toString();
}
