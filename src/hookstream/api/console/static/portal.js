// Opens a portal link. Its token is in the URL fragment, which the browser never sends
// to a server (so no access or proxy log holds it): post it once, and drop it from the
// address bar and the history first.
(function () {
  "use strict";
  var form = document.getElementById("portal-open");
  if (!form) {
    return;
  }
  var match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
  window.history.replaceState(null, "", window.location.pathname);
  if (!match) {
    document.getElementById("portal-missing").hidden = false;
    return;
  }
  form.elements.token.value = decodeURIComponent(match[1]);
  form.submit();
})();
