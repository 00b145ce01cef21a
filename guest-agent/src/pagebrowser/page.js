// The page browser's helper, evaluated once in each isolated world the runtime creates (see
// world.rs). The value of this expression is the helper object; Rust keeps a handle to it and
// calls its methods with Runtime.callFunctionOn. Nothing here is reachable from the page: the
// isolated world has its own globals and its own DOM wrappers and prototypes, so page scripts that
// redefine globals or patch prototypes (Element.prototype.getBoundingClientRect, ...) in the main
// world change nothing here.
//
// It owns, per document: the element <-> ref maps (refs are minted from a counter Rust passes in,
// so a ref is never reused while the browser lives), the set of fields filled from saved logins,
// the snapshot walk, and the checks that run before anything is dispatched (stale, disabled,
// covered). Results are plain JSON-able objects; errors are `{error: <code>, detail?}` values,
// never exceptions, and never carry fill text.
(() => {
  'use strict';
  const doc = document;
  const win = window;
  const refOf = new WeakMap(); // Element -> "e12"
  const byRef = new Map(); // "e12" -> WeakRef(Element)
  const savedLogin = new WeakSet(); // fields filled from a saved login: their value never shows
  let pendingSeal = null; // {el, key}: the private half of a sealed fill in progress

  // Candidates are found with a cheap selector and filtered here (a long selector list with
  // case-insensitive attribute matches costs several times more on large pages).
  const CANDIDATES = 'a[href],button,input,select,textarea,summary,[contenteditable],[onclick],[role]';
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'switch', 'tab', 'menuitem',
    'menuitemcheckbox', 'menuitemradio', 'option', 'combobox', 'textbox', 'searchbox', 'slider',
    'spinbutton', 'treeitem']);
  function interactive(el) {
    switch (el.localName) {
      case 'a': case 'button': case 'select': case 'textarea': case 'summary': return true;
      case 'input': return (el.getAttribute('type') || '').toLowerCase() !== 'hidden';
      case 'body': case 'html': return false;
      default:
        if (el.isContentEditable) return !(el.parentElement && el.parentElement.isContentEditable);
        if (el.hasAttribute('onclick')) return true;
        return ROLES.has((el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase());
    }
  }
  // Up to this many candidates every one is measured; beyond, only a window around the viewport.
  const MEASURE_ALL = 1500;
  const INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', file: 'button',
    color: 'button', checkbox: 'checkbox', radio: 'radio', range: 'slider', number: 'spinbutton',
    search: 'searchbox',
  };
  // Input types whose value a fill sets; the rest are clicked.
  const FILLABLE = new Set(['text', 'search', 'email', 'url', 'tel', 'password', 'number', 'date',
    'time', 'datetime-local', 'month', 'week', 'color', 'range']);
  // Input types whose value sanitization drops line breaks (HTML "value sanitization").
  const ONE_LINE = new Set(['text', 'search', 'url', 'tel', 'password', 'email']);
  const CHECKED = { true: 'checked', false: 'unchecked', mixed: 'mixed' };
  const nativeValue = {
    input: Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value'),
    textarea: Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value'),
    select: Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value'),
  };

  // ---------------------------------------------------------------- strings

  // Collapses whitespace and cuts to `max` UTF-16 units without splitting a surrogate pair;
  // lone surrogates become U+FFFD so the JSON that leaves the world is always valid UTF-8.
  function clip(s, max) {
    s = String(s == null ? '' : s).replace(/\s+/g, ' ').trim();
    return cut(s, max);
  }
  function cut(s, max) {
    if (s.length > max) {
      let n = max;
      const c = s.charCodeAt(n - 1);
      if (c >= 0xd800 && c <= 0xdbff) n -= 1;
      s = s.slice(0, n);
    }
    return s.toWellFormed ? s.toWellFormed() : s;
  }

  // The page's rendered text, cut to `max`: trimmed lines, inner whitespace collapsed, no empty
  // lines. innerText follows layout (no display:none or visibility:hidden text), but it costs
  // time proportional to the subtree and does not enter shadow roots; so a subtree whose raw
  // text could exceed what is still needed, or that holds a shadow host, is walked child by
  // child in the flat tree (shadow roots, then slotted nodes), stopping once the budget is
  // spent. Block children start new lines, inline children continue the line.
  function pageText(max, hosts) {
    const root = doc.body || doc.documentElement;
    if (!root) return { text: '', cut: false };
    const parts = [];
    let left = max + 1;
    const add = (t) => {
      if (left > 0 && t) {
        parts.push(t);
        left -= t.length;
      }
    };
    // Whether innerText would miss text: a shadow host inside, or (within a shadow tree) a
    // slot, whose assigned nodes innerText does not follow.
    const holdsHost = (node) => {
      for (const h of hosts) if (node.contains(h)) return true;
      return node.getRootNode() !== doc
        && (node.localName === 'slot' || node.querySelector('slot') !== null);
    };
    const walk = (node) => {
      if (left <= 0) return;
      // textContent is cheap and bounds innerText from above (it also counts hidden text); up to
      // a few times the budget, one innerText costs less than walking the children.
      if (node.nodeType === Node.ELEMENT_NODE && node.textContent.length <= left * 4 + 256
        && !holdsHost(node)) {
        add(node.innerText);
        return;
      }
      let kids = node.childNodes;
      if (node.shadowRoot) {
        kids = node.shadowRoot.childNodes;
      } else if (node.localName === 'slot') {
        const assigned = node.assignedNodes({ flatten: true });
        if (assigned.length) kids = assigned;
      }
      for (const child of kids) {
        if (left <= 0) return;
        if (child.nodeType === Node.TEXT_NODE) {
          add(child.data.replace(/\s+/g, ' '));
        } else if (child.nodeType === Node.ELEMENT_NODE) {
          const tag = tagOf(child);
          if (tag === 'script' || tag === 'style' || tag === 'template' || tag === 'noscript') {
            continue;
          }
          const style = getComputedStyle(child);
          if (style.display === 'none' || style.contentVisibility === 'hidden') continue;
          // display:contents (slots, for one) has no box but its children do.
          const block = !style.display.startsWith('inline') && style.display !== 'contents';
          if (block) add('\n');
          // A visibility:hidden element may still have visible descendants.
          if (style.visibility === 'visible' || child.childElementCount || child.shadowRoot) {
            walk(child);
          }
          if (block) add('\n');
        }
      }
    };
    walk(root);
    const out = [];
    let len = 0;
    for (const line of parts.join('').split('\n')) {
      const t = line.replace(/\s+/g, ' ').trim();
      if (!t) continue;
      out.push(t);
      len += t.length + 1;
      if (len > max) break;
    }
    const text = out.join('\n');
    // The walk stops once it has more than `max`: more means there was more to read.
    return { text: cut(text, max), cut: text.length > max || left <= 0 };
  }

  // ---------------------------------------------------------------- visibility

  function viewport() {
    const de = doc.documentElement;
    return {
      w: (de && de.clientWidth) || win.innerWidth,
      h: (de && de.clientHeight) || win.innerHeight,
    };
  }

  // The element's box when it may be visible: at least 2x2 CSS pixels and not placed where no
  // scrolling reaches (left of or above the page). One layout query; display:none gives 0x0.
  // `scroll` is the page's scroll offset, read once per call (each read is a layout check).
  function rectOf(el, scroll) {
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) return null;
    if (r.right + scroll.x <= 0 || r.bottom + scroll.y <= 0) return null;
    return r;
  }

  function scrollOffset() {
    return { x: win.scrollX, y: win.scrollY };
  }

  // Whether an element with a box is visible on the rendered page: rendered (not
  // visibility:hidden, not under content-visibility:hidden) and not inside an
  // aria-hidden="true" or inert subtree. Opacity is not checked: transparent controls laid over
  // styled ones are what people click.
  function shown(el) {
    if (el.checkVisibility
      && !el.checkVisibility({ visibilityProperty: true, contentVisibilityAuto: true })) {
      return false;
    }
    return !el.closest('[aria-hidden="true" i],[inert]');
  }

  // The element's box when it is visible (see rectOf and shown), else null.
  function boxOf(el) {
    if (!el.isConnected) return null;
    const r = rectOf(el, scrollOffset());
    return r && shown(el) ? r : null;
  }

  function isDisabled(el) {
    return el.matches(':disabled') || (el.getAttribute('aria-disabled') || '').toLowerCase() === 'true';
  }

  // Every open shadow root under `root`, depth first. Indexing getElementsByTagName is several
  // times cheaper than iterating querySelectorAll('*') on large documents.
  function shadowRoots(root, out) {
    const all = root.getElementsByTagName
      ? root.getElementsByTagName('*') : root.querySelectorAll('*');
    for (let i = 0; i < all.length; i += 1) {
      const sr = all[i].shadowRoot;
      if (sr) {
        out.push(sr);
        shadowRoots(sr, out);
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- roles, names, values

  function tagOf(el) {
    return el.localName || 'element';
  }
  function typeOf(el) {
    return tagOf(el) === 'input' ? (el.type || 'text').toLowerCase() : '';
  }

  function roleOf(el, tag, type) {
    const explicit = (el.getAttribute('role') || '').trim().split(/\s+/)[0].toLowerCase();
    if (explicit && explicit !== 'presentation' && explicit !== 'none' && explicit !== 'generic') {
      return explicit;
    }
    switch (tag) {
      case 'a': return 'link';
      case 'button': case 'summary': return 'button';
      case 'select': return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'textarea': return 'textbox';
      case 'input': return INPUT_ROLES[type] || 'textbox';
      default: return el.isContentEditable ? 'textbox' : 'button';
    }
  }

  function textById(el, ids) {
    const root = el.getRootNode();
    return ids.split(/\s+/).map((id) => {
      const t = (root.getElementById ? root.getElementById(id) : null) || doc.getElementById(id);
      return t ? t.textContent : '';
    }).join(' ');
  }

  // A label's text without the controls inside it (a wrapped select would add its options).
  function labelText(node) {
    let out = '';
    for (const n of node.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) {
        out += n.data;
      } else if (n.nodeType === Node.ELEMENT_NODE) {
        const t = tagOf(n);
        if (t === 'select' || t === 'textarea' || t === 'input' || t === 'button'
          || t === 'script' || t === 'style') continue;
        out += ' ' + labelText(n) + ' ';
      }
    }
    return out;
  }

  function nameOf(el, tag, type, max) {
    let n = '';
    const by = el.getAttribute('aria-labelledby');
    if (by) n = clip(textById(el, by), max);
    if (!n) n = clip(el.getAttribute('aria-label'), max);
    if (!n && el.labels && el.labels.length) {
      n = clip(Array.from(el.labels, labelText).join(' '), max);
    }
    if (!n && tag === 'input') {
      if (type === 'submit' || type === 'reset' || type === 'button') {
        n = clip(el.value || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : ''), max);
      } else if (type === 'image') {
        n = clip(el.alt || el.value, max);
      }
    }
    if (!n && tag !== 'input' && tag !== 'select' && tag !== 'textarea' && !el.isContentEditable) {
      n = clip(el.innerText, max);
      if (!n) {
        const img = el.querySelector('img[alt],[aria-label]');
        if (img) n = clip(img.getAttribute('alt') || img.getAttribute('aria-label'), max);
      }
    }
    if (!n) n = clip(el.getAttribute('title'), max);
    if (!n) n = clip(el.getAttribute('placeholder') || el.getAttribute('aria-placeholder'), max);
    return n;
  }

  function masked(el, tag, type) {
    return savedLogin.has(el)
      || (tag === 'input' && (type === 'password' || /password/i.test(el.autocomplete || '')));
  }

  function valueOf(el, tag, type, role, max) {
    if (masked(el, tag, type)) return '';
    if (tag === 'input') {
      if (type === 'checkbox' || type === 'radio') return el.checked ? 'checked' : 'unchecked';
      if (type === 'file') return cut(Array.from(el.files || [], (f) => f.name).join(', '), max);
      if (type === 'button' || type === 'submit' || type === 'reset' || type === 'image') return '';
      return cut(el.value, max);
    }
    if (tag === 'textarea') return cut(el.value, max);
    if (tag === 'select') {
      return cut(Array.from(el.selectedOptions, (o) => clip(o.label || o.text, max)).join(', '), max);
    }
    const checked = (el.getAttribute('aria-checked') || '').toLowerCase();
    if (checked in CHECKED) return CHECKED[checked];
    if (el.isContentEditable) return cut(el.innerText, max);
    if (role === 'slider' || role === 'spinbutton') {
      return clip(el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow'), max);
    }
    return '';
  }

  // ---------------------------------------------------------------- refs

  function refFor(el, counter) {
    let r = refOf.get(el);
    if (!r) {
      r = 'e' + counter.next;
      counter.next += 1;
      refOf.set(el, r);
      byRef.set(r, new WeakRef(el));
    }
    return r;
  }

  // Forgets refs of collected or detached elements once the map grows, so it stays bounded. A
  // forgotten ref is unknown from then on (stale), and the element gets a new ref if it returns.
  function prune() {
    if (byRef.size < 4096) return;
    for (const [r, w] of byRef) {
      const el = w.deref();
      if (!el || !el.isConnected) {
        byRef.delete(r);
        if (el) refOf.delete(el);
      }
    }
  }

  // The live, visible, enabled element a ref names, or an error. Never looks for a similar
  // element: a ref names one exact element or nothing.
  function resolve(ref) {
    const w = byRef.get(ref);
    const el = w && w.deref();
    if (!el || el.ownerDocument !== doc || !boxOf(el)) return { error: 'stale' };
    if (isDisabled(el)) return { error: 'disabled' };
    return { el };
  }

  // ---------------------------------------------------------------- snapshot

  // The candidates in one index space: the document's (a NodeList, in document order, not
  // copied: on large pages most are never touched) then those of open shadow roots.
  function candidates(roots) {
    const main = doc.querySelectorAll(CANDIDATES);
    const extra = [];
    for (const root of roots) {
      if (root === doc) continue;
      const found = root.querySelectorAll(CANDIDATES);
      for (let i = 0; i < found.length; i += 1) extra.push(found[i]);
    }
    const n = main.length;
    return { n, length: n + extra.length, at: (i) => (i < n ? main[i] : extra[i - n]) };
  }

  // Measures candidate `i` once: its distance from the viewport (0 on screen), or null when it
  // is not interactive or has no usable box.
  function measurer(list, vw, vh) {
    const seen = new Map();
    const scroll = scrollOffset();
    const measure = (i) => {
      if (seen.has(i)) return seen.get(i);
      const el = list.at(i);
      const r = interactive(el) ? rectOf(el, scroll) : null;
      let item = null;
      if (r) {
        const dy = r.bottom <= 0 ? -r.bottom : r.top >= vh ? r.top - vh : 0;
        const dx = r.right <= 0 ? -r.right : r.left >= vw ? r.left - vw : 0;
        item = { el, dist: dx + dy, order: i };
      }
      seen.set(i, item);
      return item;
    };
    return { measure, seen };
  }

  // Index of `el` among the document's candidates (in document order), or -1.
  function indexOf(list, el) {
    let lo = 0;
    let hi = list.n - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const other = list.at(mid);
      if (other === el) return mid;
      const pos = other.compareDocumentPosition(el);
      if (pos & Node.DOCUMENT_POSITION_DISCONNECTED) return -1;
      if (pos & Node.DOCUMENT_POSITION_FOLLOWING) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  // The candidates worth ranking. Every candidate needs a layout query for its position, and
  // those cost microseconds each; so on large pages (more than MEASURE_ALL candidates) only a
  // window is measured: the first and last candidates (headers, footers, fixed bars), a run
  // around the viewport found by binary search in document order (normal flow grows downwards),
  // and whatever a grid of hit tests finds on screen (fixed or out-of-flow layouts).
  function ranked(list, max, vw, vh) {
    const { measure, seen } = measurer(list, vw, vh);
    if (list.length <= MEASURE_ALL) {
      for (let i = 0; i < list.length; i += 1) measure(i);
    } else {
      // Candidates in shadow trees follow the document's, out of document order: up to a
      // fixed number of them are measured; the window applies to the document's.
      const n = list.n;
      for (let i = n; i < Math.min(list.length, n + 500); i += 1) measure(i);
      for (let i = 0; i < Math.min(n, 40); i += 1) measure(i);
      for (let i = Math.max(0, n - 20); i < n; i += 1) measure(i);
      // The bottom of candidate i, or of the next one with a box (hidden ones have none).
      const bottom = (i) => {
        for (let j = i; j < Math.min(n, i + 16); j += 1) {
          const r = list.at(j).getBoundingClientRect();
          if (r.width || r.height) return r.bottom;
        }
        return 0;
      };
      let lo = 0;
      let hi = n;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (bottom(mid) > 0) hi = mid;
        else lo = mid + 1;
      }
      // From there on: enough candidates to fill the snapshot even if some turn out hidden;
      // before it: the nearest ones above the viewport.
      let found = 0;
      for (let i = lo; i < n && found < max + (max >> 1); i += 1) if (measure(i)) found += 1;
      found = 0;
      for (let i = lo - 1; i >= 0 && found < (max >> 1); i -= 1) if (measure(i)) found += 1;
      // A hit test costs about as much as 50 rect queries: five points. A hit is mapped to its
      // candidate by binary search in document order (the list is in document order per root).
      for (const [fx, fy] of [[0.5, 0.5], [0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]) {
        for (let hit = doc.elementFromPoint(vw * fx, vh * fy); hit; hit = hit.parentElement) {
          const i = indexOf(list, hit);
          if (i >= 0) {
            measure(i);
            break;
          }
        }
      }
    }
    const items = [];
    for (const item of seen.values()) if (item) items.push(item);
    return items.sort((p, q) => p.dist - q.dist || p.order - q.order);
  }

  // The snapshot: at most `maxElements` visible interactive elements, those on screen first
  // then the nearest, listed in document order; names and values are computed for those only.
  function snapshot(a) {
    const started = performance.now();
    const { w: vw, h: vh } = viewport();
    let frames = false;
    const roots = shadowRoots(doc, [doc]);
    // Candidates that are not interactive after all (an input of type hidden, a role that is
    // not a control) or hidden drop out when measured, or when chosen (shown).
    const list = candidates(roots);
    for (const root of roots) {
      if (!frames) {
        for (const f of root.querySelectorAll('iframe,frame')) {
          if (boxOf(f)) {
            frames = true;
            break;
          }
        }
      }
    }
    const chosen = [];
    for (const item of ranked(list, a.maxElements, vw, vh)) {
      if (chosen.length >= a.maxElements) break;
      if (shown(item.el)) chosen.push(item);
    }
    chosen.sort((p, q) => p.order - q.order);
    prune();
    const counter = { next: a.next };
    const elements = chosen.map(({ el }) => {
      const tag = tagOf(el);
      const type = typeOf(el);
      const role = roleOf(el, tag, type);
      return {
        ref: refFor(el, counter),
        role,
        name: nameOf(el, tag, type, a.maxName),
        value: valueOf(el, tag, type, role, a.maxValue),
        tag,
      };
    });
    const tab = a.probe ? probe() : null;
    const url = cut(String(doc.URL), a.maxUrl);
    const title = clip(doc.title, a.maxTitle);
    // Rust cuts the text to keep the whole snapshot within maxBytes (as JSON); walking text
    // that would be cut anyway is wasted, so estimate what will be left, with some slack for
    // Rust to cut at a line break.
    let used = 256 + url.length + title.length;
    for (const e of elements) {
      used += 2 * (e.name.length + e.value.length + e.role.length) + e.tag.length + 80;
    }
    const textMax = Math.max(0, Math.min(a.maxText, a.maxBytes - used + 512));
    const text = pageText(textMax, roots.slice(1).map((r) => r.host));
    return {
      url,
      title,
      text: text.text,
      textCut: text.cut,
      elements,
      frames,
      next: counter.next,
      visible: tab ? tab.visible : true,
      candidates: list.length,
      ms: performance.now() - started,
    };
  }

  // ---------------------------------------------------------------- marks

  // Where the viewport sits on the screen, for Rust to map CSS pixels to screen pixels:
  // window position and outer size in DIPs, the viewport in CSS pixels, the device pixel ratio
  // (device scale factor times zoom) and the screen's width in DIPs.
  function view() {
    return {
      dpr: win.devicePixelRatio,
      screenX: win.screenX,
      screenY: win.screenY,
      outerWidth: win.outerWidth,
      outerHeight: win.outerHeight,
      innerWidth: win.innerWidth,
      innerHeight: win.innerHeight,
      screenWidth: win.screen.width,
    };
  }

  // Every visible interactive element with a box in the viewport (up to `a.max`, in document
  // order), with its ref, role, name and viewport box in CSS pixels, and the view to map them.
  function marks(a) {
    const started = performance.now();
    const { w: vw, h: vh } = viewport();
    const list = candidates(shadowRoots(doc, [doc]));
    const counter = { next: a.next };
    const out = [];
    let more = false;
    for (let i = 0; i < list.length; i += 1) {
      const el = list.at(i);
      if (!interactive(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width < 2 || r.height < 2 || r.right <= 0 || r.bottom <= 0 || r.left >= vw
        || r.top >= vh || !shown(el)) continue;
      if (out.length >= a.max) {
        more = true;
        break;
      }
      const tag = tagOf(el);
      const type = typeOf(el);
      out.push({
        ref: refFor(el, counter),
        role: roleOf(el, tag, type),
        name: nameOf(el, tag, type, a.maxName),
        x: r.left,
        y: r.top,
        w: r.width,
        h: r.height,
      });
    }
    prune();
    const tab = probe();
    return {
      marks: out, more, next: counter.next, vw, vh, view: view(), visible: tab.visible,
      ms: performance.now() - started,
    };
  }

  // The click point of a ref (as prepareClick finds it: scrolled into view, hit-tested) and the
  // view to map it to the screen.
  function locate(a) {
    const p = prepareClick(a);
    if (p.error) return p;
    return { x: p.x, y: p.y, view: view() };
  }

  // ---------------------------------------------------------------- click

  // Deepest element at a viewport point, through open shadow roots.
  function hitAt(x, y) {
    let hit = doc.elementFromPoint(x, y);
    while (hit && hit.shadowRoot) {
      const inner = hit.shadowRoot.elementFromPoint(x, y);
      if (!inner || inner === hit) break;
      hit = inner;
    }
    return hit;
  }

  // Whether `node` is `el` or inside it (crossing shadow boundaries upwards).
  function within(node, el) {
    for (let n = node; n; n = n.parentNode || n.host) {
      if (n === el) return true;
    }
    return false;
  }

  function describe(el) {
    let d = tagOf(el);
    if (el.id) d += '#' + el.id;
    const classes = Array.from(el.classList || []).slice(0, 3);
    if (classes.length) d += '.' + classes.join('.');
    d = cut(d, 120);
    const text = clip(el.innerText || el.getAttribute('aria-label') || '', 80);
    return text ? d + ' ' + JSON.stringify(text) : d;
  }

  function firstRect(el) {
    for (const r of el.getClientRects()) {
      if (r.width > 0 && r.height > 0) return r;
    }
    return null;
  }

  // The visible part of the element's first client rect, or null when none is on screen.
  function onScreen(r, vw, vh) {
    if (!r) return null;
    const left = Math.max(r.left, 0);
    const right = Math.min(r.right, vw);
    const top = Math.max(r.top, 0);
    const bottom = Math.min(r.bottom, vh);
    if (right - left < 1 || bottom - top < 1) return null;
    return { x: (left + right) / 2, y: (top + bottom) / 2 };
  }

  // Scrolls the element into view and hit-tests its click point; dispatches nothing. Returns
  // the point for a real pointer click, or why the click would not reach the element.
  function prepareClick(a) {
    const found = resolve(a.ref);
    if (found.error) return found;
    const el = found.el;
    const { w: vw, h: vh } = viewport();
    let point = onScreen(firstRect(el), vw, vh);
    if (!point) {
      // "instant" overrides a page's scroll-behavior: smooth, so the box stops moving now.
      el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
      point = onScreen(firstRect(el), vw, vh);
    }
    if (!point) return { error: 'offscreen' };
    const hit = hitAt(point.x, point.y);
    if (!hit) return { error: 'offscreen' };
    const label = hit.closest && hit.closest('label');
    if (!within(hit, el) && !(label && label.control === el)) {
      return { error: 'covered', detail: describe(hit) };
    }
    return { x: point.x, y: point.y };
  }

  // ---------------------------------------------------------------- fill, select, type

  function fillKind(el) {
    const tag = tagOf(el);
    const type = typeOf(el);
    let kind = null;
    if (tag === 'input' && FILLABLE.has(type)) kind = 'input';
    else if (tag === 'textarea') kind = 'textarea';
    else if (tag === 'select') kind = 'select';
    else if (el.isContentEditable) kind = 'editable';
    if (!kind) return { error: 'notfillable', detail: roleOf(el, tag, type) };
    if ((kind === 'input' || kind === 'textarea') && el.readOnly) return { error: 'readonly' };
    return { kind, type };
  }

  function originOk(origin) {
    return location.protocol === 'https:' && location.origin === origin;
  }

  function fire(el, type) {
    const init = { bubbles: true, composed: true };
    el.dispatchEvent(type === 'input'
      ? new InputEvent('input', { ...init, inputType: 'insertReplacementText' })
      : new Event(type, init));
  }

  function optionIndex(el, value) {
    const opts = Array.from(el.options);
    let i = opts.findIndex((o) => o.value === value);
    if (i < 0) i = opts.findIndex((o) => clip(o.label || o.text, 2000) === clip(value, 2000));
    if (i < 0) {
      const want = clip(value, 2000).toLowerCase();
      i = opts.findIndex((o) => clip(o.label || o.text, 2000).toLowerCase() === want);
    }
    return i;
  }

  // Selects the option whose value, or else visible text, is `value`; fires input and change and
  // checks the selection held. `dispatched` tells Rust the page saw events.
  function selectOption(el, value) {
    const i = optionIndex(el, value);
    if (i < 0) return { error: 'nooption' };
    const opt = el.options[i];
    if (opt.disabled) return { error: 'optiondisabled' };
    el.focus();
    if (el.multiple) {
      for (const o of el.options) o.selected = false;
      opt.selected = true;
    } else {
      el.selectedIndex = i;
    }
    fire(el, 'input');
    fire(el, 'change');
    return el.options[i] && el.options[i].selected ? { ok: true } : { error: 'verify', dispatched: true };
  }

  // What the field's value must read after a fill of `text` (the browser sanitizes some types).
  function expected(kind, type, text) {
    if (kind === 'textarea') return text.replace(/\r\n?/g, '\n');
    if (kind === 'input' && ONE_LINE.has(type)) {
      const t = text.replace(/[\r\n]/g, '');
      return type === 'email' || type === 'url' ? t.trim() : t;
    }
    return text;
  }

  // Sets the value with the native setter (so framework value trackers see a change), fires
  // input and change, and verifies the value held.
  function setValue(el, kind, type, text) {
    if (kind === 'select') return selectOption(el, text);
    el.focus();
    if (kind === 'editable') {
      el.textContent = text;
      fire(el, 'input');
      return el.textContent === text ? { ok: true } : { error: 'verify', dispatched: true };
    }
    nativeValue[kind].set.call(el, text);
    fire(el, 'input');
    fire(el, 'change');
    const now = nativeValue[kind].get.call(el);
    return now === expected(kind, type, text) ? { ok: true } : { error: 'verify', dispatched: true };
  }

  function fill(a) {
    const found = resolve(a.ref);
    if (found.error) return found;
    const k = fillKind(found.el);
    if (k.error) return k;
    return setValue(found.el, k.kind, k.type, a.text);
  }

  function hexToBytes(h) {
    const out = new Uint8Array(h.length >> 1);
    for (let i = 0; i < out.length; i += 1) out[i] = parseInt(h.substr(i * 2, 2), 16);
    return out;
  }
  function bytesToHex(b) {
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  // First half of a sealed fill (a saved login, or any password field): checks the element and
  // the origin, then makes an ECDH P-256 key pair whose private half never leaves this world.
  // Rust answers with its public key and the text XORed with a SHA-256 keystream of the shared
  // secret, so the text never crosses CDP (or any CDP trace log) in the clear.
  async function sealBegin(a) {
    pendingSeal = null;
    const found = resolve(a.ref);
    if (found.error) return found;
    const k = fillKind(found.el);
    if (k.error) return k;
    if (a.origin != null && !originOk(a.origin)) return { error: 'origin' };
    if (!(win.crypto && crypto.subtle)) return { error: 'nocrypto' };
    const key = await crypto.subtle.generateKey({ name: 'ECDH', namedCurve: 'P-256' }, false,
      ['deriveBits']);
    const pub = new Uint8Array(await crypto.subtle.exportKey('raw', key.publicKey));
    pendingSeal = { el: found.el, key: key.privateKey };
    return { pub: bytesToHex(pub) };
  }

  async function sealFill(a) {
    const pending = pendingSeal;
    pendingSeal = null;
    let found = resolve(a.ref);
    if (found.error) return found;
    if (!pending || pending.el !== found.el) return { error: 'stale' };
    const peer = await crypto.subtle.importKey('raw', hexToBytes(a.pub),
      { name: 'ECDH', namedCurve: 'P-256' }, false, []);
    const secret = new Uint8Array(await crypto.subtle.deriveBits({ name: 'ECDH', public: peer },
      pending.key, 256));
    const sealed = hexToBytes(a.sealed);
    const label = new TextEncoder().encode(a.label);
    const plain = new Uint8Array(sealed.length);
    for (let block = 0; block * 32 < sealed.length; block += 1) {
      const input = new Uint8Array(secret.length + label.length + 4);
      input.set(secret, 0);
      input.set(label, secret.length);
      new DataView(input.buffer).setUint32(secret.length + label.length, block);
      const stream = new Uint8Array(await crypto.subtle.digest('SHA-256', input));
      for (let i = 0; i < 32 && block * 32 + i < sealed.length; i += 1) {
        plain[block * 32 + i] = sealed[block * 32 + i] ^ stream[i];
      }
    }
    const text = new TextDecoder('utf-8', { fatal: false }).decode(plain);
    plain.fill(0);
    // Everything from here runs synchronously: the element, the origin and the fill are checked
    // and done in one turn of this evaluation, with no await in between.
    found = resolve(a.ref);
    if (found.error) return found;
    if (found.el !== pending.el) return { error: 'stale' };
    const k = fillKind(found.el);
    if (k.error) return k;
    if (a.origin != null) {
      if (!originOk(a.origin)) return { error: 'origin' };
      savedLogin.add(found.el);
    }
    return setValue(found.el, k.kind, k.type, text);
  }

  function select(a) {
    const found = resolve(a.ref);
    if (found.error) return found;
    if (tagOf(found.el) !== 'select') return { error: 'notselect' };
    return selectOption(found.el, a.value);
  }

  // Focuses a text field for typing, caret at the end. Dispatches nothing but focus.
  function focusForTyping(a) {
    const found = resolve(a.ref);
    if (found.error) return found;
    const el = found.el;
    const k = fillKind(el);
    if (k.error) return k;
    if (k.kind === 'select') return { error: 'notfillable', detail: 'combobox' };
    el.focus();
    if (k.kind === 'editable') {
      const sel = win.getSelection();
      sel.selectAllChildren(el);
      sel.collapseToEnd();
    } else {
      try {
        const end = el.value.length;
        el.setSelectionRange(end, end);
      } catch (_) {
        // Types without a selection API (email, number) keep the caret where focus put it.
      }
    }
    let active = doc.activeElement;
    while (active && active.shadowRoot && active.shadowRoot.activeElement) {
      active = active.shadowRoot.activeElement;
    }
    return active === el ? { ok: true } : { error: 'focus' };
  }

  // ---------------------------------------------------------------- tabs and loading

  function probe() {
    return { visible: doc.visibilityState === 'visible', focused: doc.hasFocus() };
  }

  // Resolves with the ready state once the document is past "loading", or after `ms`.
  function waitReady(a) {
    if (doc.readyState !== 'loading') return Promise.resolve(doc.readyState);
    return new Promise((done) => {
      const timer = setTimeout(() => done(doc.readyState), a.ms);
      doc.addEventListener('readystatechange', () => {
        clearTimeout(timer);
        done(doc.readyState);
      }, { once: true });
    });
  }

  return {
    probe, snapshot, prepareClick, fill, sealBegin, sealFill, select, focusForTyping, waitReady,
    marks, locate,
  };
})()
