// gym-serve rollout viewer: the little the pages do in the browser (no build step, no framework).
// Choosing a filter applies it; typing in the search box applies it after a pause; `r` opens or closes
// every reasoning block of the page.
(function () {
  "use strict";
  const form = document.getElementById("filters");
  if (form) {
    form.querySelectorAll("select").forEach((select) => select.addEventListener("change", () => form.submit()));
    const search = form.querySelector("input[type=search]");
    let pending = null;
    if (search) {
      search.addEventListener("input", () => {
        clearTimeout(pending);
        pending = setTimeout(() => form.submit(), 600);
      });
    }
  }
  document.addEventListener("keydown", (event) => {
    if (event.key !== "r" || event.target.closest("input, select, textarea")) return;
    const blocks = Array.from(document.querySelectorAll("details.reasoning"));
    const open = blocks.some((block) => !block.open);
    blocks.forEach((block) => { block.open = open; });
  });
})();
