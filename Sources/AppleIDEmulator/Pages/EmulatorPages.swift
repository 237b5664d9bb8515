import Hummingbird
import Mustache

/// The emulator's own pages: consent, errors, and the auto-submitting form of `form_post`.
/// Kept in code (not files) so a standalone `siwa emulator` needs nothing beside the binary.
enum EmulatorPages {
    static let layoutHead = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} — Apple ID emulator</title><link rel="stylesheet" href="/emulator/static/style.css"></head>
        <body><div class="banner" role="note">Apple ID <strong>emulator</strong> — a local stand-in for appleid.apple.com. Nothing here talks to Apple.</div>
        <main>
        """
    static let layoutFoot = "</main></body></html>"

    static let consent = try? MustacheTemplate(string: layoutHead + """
        <h1>Sign in to {{clientID}}</h1>
        <p>Choose a test user and what to share with <strong>{{clientID}}</strong>.</p>
        <form method="post" action="/auth/authorize/consent">
        {{#hidden}}<input type="hidden" name="{{name}}" value="{{value}}">{{/hidden}}
        <fieldset><legend>Test user</legend>
        {{#users}}<label class="user"><input type="radio" name="emulator_user" value="{{sub}}" {{#checked}}checked{{/checked}}> {{firstName}} {{lastName}} &lt;{{email}}&gt;</label>
        {{/users}}</fieldset>
        {{#askName}}<fieldset><legend>Name</legend>
        <label for="first_name">First name</label><input id="first_name" name="emulator_first_name" value="" placeholder="as the test user">
        <label for="last_name">Last name</label><input id="last_name" name="emulator_last_name" value="" placeholder="as the test user">
        </fieldset>{{/askName}}
        {{#askEmail}}<fieldset><legend>Email</legend>
        <label><input type="radio" name="emulator_email" value="share" checked> Share my email</label>
        <label><input type="radio" name="emulator_email" value="hide"> Hide my email (private relay)</label>
        </fieldset>{{/askEmail}}
        <div class="actions"><button type="submit" name="emulator_action" value="continue" id="continue">Continue</button>
        <button type="submit" name="emulator_action" value="cancel" id="cancel" class="secondary">Cancel</button></div>
        </form>
        """ + layoutFoot)

    static let error = try? MustacheTemplate(string: layoutHead + """
        <h1>{{heading}}</h1><p class="error" id="error-code">{{code}}</p><p>{{message}}</p>
        """ + layoutFoot)

    static let formPost = try? MustacheTemplate(string: layoutHead + """
        <h1>Returning to the website…</h1>
        <form method="post" action="{{action}}" id="apple-return">
        {{#fields}}<input type="hidden" name="{{name}}" value="{{value}}">{{/fields}}
        <noscript><button type="submit">Continue</button></noscript>
        </form><script src="/emulator/static/autosubmit.js"></script>
        """ + layoutFoot)

    static let webMessage = try? MustacheTemplate(string: layoutHead + """
        <h1>Returning to the website…</h1>
        <script type="application/json" id="apple-result" data-origin="{{origin}}">{{{json}}}</script>
        <script src="/emulator/static/web-message.js"></script>
        """ + layoutFoot)

    static let css = """
        body{font:16px/1.5 -apple-system,system-ui,sans-serif;margin:0;color:#1d1d1f;background:#f5f5f7}
        .banner{background:#ffd60a;color:#000;padding:.5rem 1rem;text-align:center}
        main{max-width:34rem;margin:2rem auto;background:#fff;padding:2rem;border-radius:12px}
        fieldset{border:1px solid #d2d2d7;border-radius:8px;margin:1rem 0}label{display:block;margin:.25rem 0}
        input[type=text],input:not([type]){font:inherit;padding:.4rem;width:100%;box-sizing:border-box;border:1px solid #86868b;border-radius:6px}
        button{font:inherit;padding:.6rem 1.4rem;border-radius:8px;border:0;background:#000;color:#fff;cursor:pointer;margin-right:.5rem}
        button.secondary{background:#fff;color:#000;border:1px solid #000}button:focus{outline:3px solid #0071e3;outline-offset:2px}
        .error{font-family:monospace;color:#b00020}
        """

    static let autosubmit = "document.getElementById('apple-return').submit();\n"

    static let webMessageScript = """
        (function(){var e=document.getElementById('apple-result');if(!e||!window.opener){return;}
        window.opener.postMessage(JSON.parse(e.textContent),e.getAttribute('data-origin'));window.close();})();

        """

    /// Renders a template into an HTML response.
    static func html(_ template: MustacheTemplate?, _ values: [String: Any], status: HTTPResponse.Status = .ok) -> Response {
        let body = template?.render(values) ?? "<!doctype html><title>Apple ID emulator</title><p>page unavailable</p>"
        return Response(
            status: status,
            headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body))
        )
    }

    /// The error page Apple shows for a bad authorization request.
    static func authorizeError(code: String, message: String) -> Response {
        html(error, ["title": "Error", "heading": "This sign-in request is not valid", "code": code, "message": message], status: .badRequest)
    }
}
