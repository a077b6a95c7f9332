// The copy button of the page that shows a new key. Everything else in
// the portal works without JavaScript; without it, the key stays in a
// read-only field to select and copy by hand.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("button[data-copy]").forEach(function (b) {
    var field = document.getElementById(b.getAttribute("data-copy"));
    if (!field) { return; }
    b.hidden = false;
    b.addEventListener("click", function () {
      field.select();
      var done = function () { b.textContent = "Copied"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done, function () { document.execCommand("copy"); done(); });
      } else {
        document.execCommand("copy");
        done();
      }
    });
  });
  document.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
    s.addEventListener("change", function () { s.form.submit(); });
  });
});
