// Popup sign-in (Apple's "usePopup" mode) without a third-party script: opens the authorization in a
// window, receives Apple's result by postMessage (response_mode=web_message) and sends it to the server
// with a CSRF token. The server validates it exactly like a form_post return.
(function () {
  'use strict';
  var button = document.getElementById('siwa-popup');
  if (!button) { return; }
  var appleOrigin = button.getAttribute('data-apple-origin');
  var csrf = button.getAttribute('data-csrf');
  var status = document.getElementById('siwa-popup-status');
  var popup = null;

  function show(text) { if (status) { status.textContent = text; } }

  window.addEventListener('message', function (event) {
    if (event.origin !== appleOrigin || !popup) { return; }
    popup = null;
    fetch('/auth/apple/popup', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf },
      body: JSON.stringify(event.data)
    }).then(function (response) {
      return response.json().then(function (body) { return { ok: response.ok, body: body }; });
    }).then(function (result) {
      if (result.ok && result.body.redirect) { window.location.assign(result.body.redirect); return; }
      show(result.body.message || 'Sign-in failed.');
    }).catch(function () { show(button.getAttribute('data-network-error')); });
  });

  button.addEventListener('click', function (event) {
    event.preventDefault();
    var width = 520, height = 680;
    var left = window.screenX + (window.outerWidth - width) / 2;
    var top = window.screenY + (window.outerHeight - height) / 2;
    popup = window.open(button.getAttribute('data-start'), 'siwa-popup',
      'width=' + width + ',height=' + height + ',left=' + left + ',top=' + top);
    if (!popup) { show(button.getAttribute('data-blocked')); }
  });
})();
