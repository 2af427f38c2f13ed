// bpetok playground: the text's tokens in each served vocabulary, and a chat prompt's tokens.
// Plain browser JavaScript, no build step, nothing loaded from elsewhere (bpetok serve's CSP).
"use strict";

const MAX_SHOWN = 2000;      // tokens put in the DOM per panel; the counts cover all of them
const PIECES_UP_TO = 20000;  // characters of text for which the answer carries the pieces
const DEBOUNCE_MS = 150;

const $ = (id) => document.getElementById(id);
const state = { models: [], shown: new Set(), seq: 0, chatSeq: 0, aborts: [] };

async function post(path, body, signal) {
  const answer = await fetch(path, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal,
  });
  const data = await answer.json();
  if (!answer.ok) throw new Error(data.error ? data.error.message : `HTTP ${answer.status}`);
  return data;
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// UTF-16 index of each code point of text, up to maxCp code points (offsets count code points).
function codeUnitIndex(text, maxCp) {
  const index = [0];
  let unit = 0;
  for (const ch of text) {
    if (index.length > maxCp) break;
    unit += ch.length;
    index.push(unit);
  }
  return index;
}

function pieceText(piece) {
  if (typeof piece === "string") return piece;
  return piece === undefined ? "" : "\u00b7";  // bytes that are no text alone
}

// The tokens as colored spans (at most MAX_SHOWN), each character shown once: the pieces of an
// emoji split in bytes show it with the first of them. Hover: id, character and byte offsets.
function renderTokens(box, text, tokens) {
  const shown = Math.min(tokens.length, MAX_SHOWN);
  const lastCp = shown ? tokens[shown - 1].offsets[1] : 0;
  const index = codeUnitIndex(text, lastCp);
  const fragment = document.createDocumentFragment();
  let upTo = 0;
  for (let k = 0; k < shown; k++) {
    const t = tokens[k];
    const [start, end] = t.offsets;
    const span = document.createElement("span");
    let label;
    if (start === end) {
      label = pieceText(t.piece) || "\u2205";
      span.classList.add("empty");
    } else {
      label = text.slice(index[Math.max(start, upTo)], index[end]);
      upTo = Math.max(upTo, end);
    }
    span.className += ` tok c${k % 5}` + (t.special ? " special" : "") + (t.partial ? " partial" : "");
    span.textContent = label.replace(/\n/g, "\u21b5\n");
    span.title = `id ${t.id} \u00b7 chars ${start}\u2013${end} \u00b7 bytes ${t.byte_offsets[0]}\u2013${t.byte_offsets[1]}`
      + (t.partial ? " \u00b7 part of a character" : "") + (t.special ? " \u00b7 special" : "");
    span.dataset.id = t.id;
    fragment.appendChild(span);
  }
  box.replaceChildren(fragment);
  if (tokens.length > shown) {
    const note = document.createElement("p");
    note.className = "note";
    note.textContent = `showing the first ${shown.toLocaleString("en")} of ${tokens.length.toLocaleString("en")} tokens`;
    box.appendChild(note);
  }
}

function textStats(text) {
  let chars = 0;
  for (const _ of text) chars++;  // code points, as the offsets count them
  const bytes = new TextEncoder().encode(text).length;
  const words = (text.match(/\S+/g) || []).length;
  return { chars, bytes, words };
}

function buildPanels() {
  const panels = $("panels");
  panels.replaceChildren();
  for (const m of state.models) {
    if (!state.shown.has(m.id)) continue;
    const panel = document.createElement("article");
    panel.className = "panel";
    panel.dataset.model = m.id;
    panel.innerHTML = `<h2></h2><p class="stats"><span data-stat="tokens">0</span> tokens \u00b7 `
      + `<span data-stat="chars">0</span> characters \u00b7 <span data-stat="bytes">0</span> bytes \u00b7 `
      + `<span data-stat="per-word">-</span> tokens/word</p><p class="error" hidden></p><div class="tokens"></div>`;
    panel.querySelector("h2").textContent = `${m.id} (${m.meta.model}/${m.meta.pre || "default"}, ${m.meta.n_tokens.toLocaleString("en")} tokens)`;
    panels.appendChild(panel);
  }
}

async function tokenizeAll() {
  const seq = ++state.seq;
  state.aborts.forEach((a) => a.abort());
  state.aborts = [];
  const text = $("text").value;
  const stats = textStats(text);
  const options = { parse_special: $("parse-special").checked, add_special: $("add-special").checked };
  $("status").textContent = "tokenizing\u2026";
  const rows = [];
  const jobs = state.models.filter((m) => state.shown.has(m.id)).map(async (m) => {
    const abort = new AbortController();
    state.aborts.push(abort);
    const panel = document.querySelector(`.panel[data-model="${CSS.escape(m.id)}"]`);
    const error = panel.querySelector(".error");
    try {
      const body = { content: text, model: m.id, with_offsets: true, with_pieces: text.length <= PIECES_UP_TO, ...options };
      const { tokens } = await post("/tokenize", body, abort.signal);
      if (seq !== state.seq) return;
      error.hidden = true;
      const perWord = stats.words ? (tokens.length / stats.words).toFixed(2) : "-";
      const values = { tokens: tokens.length, chars: stats.chars, bytes: stats.bytes, "per-word": perWord };
      for (const [key, value] of Object.entries(values)) {
        panel.querySelector(`[data-stat="${key}"]`).textContent = typeof value === "number" ? String(value) : value;
      }
      renderTokens(panel.querySelector(".tokens"), text, tokens);
      rows.push([m.id, tokens.length, stats.chars, stats.bytes, perWord]);
    } catch (e) {
      if (e.name === "AbortError" || seq !== state.seq) return;
      error.textContent = e.message;
      error.hidden = false;
    }
  });
  await Promise.all(jobs);
  if (seq !== state.seq) return;
  const fewest = Math.min(...rows.map((r) => r[1]));
  const body = $("compare").tBodies[0];
  body.replaceChildren();
  rows.sort((a, b) => a[1] - b[1]);
  for (const row of rows) {
    const tr = body.insertRow();
    tr.dataset.model = row[0];
    row.forEach((value, i) => {
      const cell = tr.insertCell();
      cell.textContent = i === 1 && fewest > 0 && row[1] !== fewest ? `${value} (\u00d7${(row[1] / fewest).toFixed(2)})` : String(value);
      if (i === 1) cell.dataset.count = String(value);
    });
  }
  $("status").textContent = "";
}

async function renderChat() {
  const seq = ++state.chatSeq;
  const error = $("chat-error");
  const model = $("chat-model").value;
  let messages;
  try {
    messages = JSON.parse($("messages").value);
  } catch (e) {
    error.textContent = `the messages are not JSON: ${e.message}`;
    error.hidden = false;
    return;
  }
  try {
    const { prompt } = await post("/apply-template", {
      messages, model, add_generation_prompt: $("generation-prompt").checked,
    });
    const { tokens } = await post("/tokenize", {
      content: prompt, model, with_offsets: true, with_pieces: true, parse_special: true,
      add_special: $("add-special").checked,
    });
    if (seq !== state.chatSeq) return;
    error.hidden = true;
    $("chat-count").textContent = String(tokens.length);
    $("chat-special").textContent = String(tokens.filter((t) => t.special).length);
    renderTokens($("chat-tokens"), prompt, tokens);
  } catch (e) {
    if (seq !== state.chatSeq) return;
    error.textContent = e.message;
    error.hidden = false;
    $("chat-tokens").replaceChildren();
    $("chat-count").textContent = "0";
  }
}

function showTab(chat) {
  $("text-view").hidden = chat;
  $("chat-view").hidden = !chat;
  $("tab-text").classList.toggle("active", !chat);
  $("tab-chat").classList.toggle("active", chat);
  $("tab-text").setAttribute("aria-pressed", String(!chat));
  $("tab-chat").setAttribute("aria-pressed", String(chat));
  if (chat) renderChat(); else tokenizeAll();
}

async function start() {
  const answer = await fetch("/models");
  state.models = (await answer.json()).data;
  const choice = $("model-choice");
  for (const m of state.models) {
    state.shown.add(m.id);
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.dataset.model = m.id;
    box.addEventListener("change", () => {
      if (box.checked) state.shown.add(m.id); else state.shown.delete(m.id);
      buildPanels();
      tokenizeAll();
    });
    label.append(box, ` ${m.id}`);
    choice.appendChild(label);
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = m.id + (m.meta.chat_template ? "" : " (no chat template)");
    $("chat-model").appendChild(option);
  }
  const firstWithTemplate = state.models.find((m) => m.meta.chat_template);
  if (firstWithTemplate) $("chat-model").value = firstWithTemplate.id;
  buildPanels();
  const later = debounce(tokenizeAll, DEBOUNCE_MS);
  const chatLater = debounce(renderChat, DEBOUNCE_MS);
  $("text").addEventListener("input", later);
  $("messages").addEventListener("input", chatLater);
  for (const id of ["parse-special", "add-special"]) {
    $(id).addEventListener("change", () => { tokenizeAll(); renderChat(); });
  }
  $("chat-model").addEventListener("change", renderChat);
  $("generation-prompt").addEventListener("change", renderChat);
  $("tab-text").addEventListener("click", () => showTab(false));
  $("tab-chat").addEventListener("click", () => showTab(true));
  await tokenizeAll();
  document.body.dataset.readyMs = String(Math.round(performance.now()));  // since navigation started
  document.body.dataset.ready = "true";
}

start().catch((e) => { $("status").textContent = `cannot reach the server: ${e.message}`; });
