// The link from a page of the book to the same page in the other edition: the English book is
// build/book/, the Korean one build/book/ko/ (notebooks/_book/conf.py). The page's place in its
// edition is its URL below the edition's root, which Sphinx gives as <html data-content_root>.
document.addEventListener("DOMContentLoaded", () => {
  const root = new URL(document.documentElement.dataset.content_root || "./", window.location.href);
  const page = window.location.href.slice(root.href.length);
  const korean = (document.documentElement.lang || "").startsWith("ko");
  const link = document.createElement("a");
  link.className = "kafkalab-lang-switch";
  link.href = new URL((korean ? "../" : "ko/") + page, root).href;
  link.hreflang = korean ? "en" : "ko";
  link.lang = korean ? "en" : "ko";
  link.textContent = korean ? "English" : "한국어";
  link.title = korean ? "The same page in English" : "이 페이지의 한국어판";
  const place = document.querySelector(".article-header-buttons") || document.querySelector(".bd-header-article")
    || document.body;
  place.prepend(link);
});
