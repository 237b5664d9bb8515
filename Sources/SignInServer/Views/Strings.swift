import Hummingbird

/// The languages pages are offered in.
public enum PageLanguage: String, Sendable, CaseIterable {
    /// English.
    case english = "en"
    /// Simplified Chinese.
    case simplifiedChinese = "zh-Hans"

    /// The best language for an `Accept-Language` header (q-values honoured); English when nothing matches.
    public static func negotiate(_ header: String?) -> PageLanguage {
        guard let header else { return .english }
        var best: (PageLanguage, Double)?
        for item in header.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let tag = parts.first?.lowercased(), !tag.isEmpty else { continue }
            var quality = 1.0
            for parameter in parts.dropFirst() where parameter.hasPrefix("q=") {
                quality = Double(parameter.dropFirst(2)) ?? 0
            }
            let language: PageLanguage?
            if tag == "zh" || tag.hasPrefix("zh-hans") || tag == "zh-cn" || tag == "zh-sg" { language = .simplifiedChinese }
            else if tag == "en" || tag.hasPrefix("en-") { language = .english }
            else { language = nil }
            if let language, quality > 0, quality > (best?.1 ?? 0) { best = (language, quality) }
        }
        return best?.0 ?? .english
    }

    /// The `lang` attribute value.
    var htmlLang: String { self == .english ? "en" : "zh-Hans" }
}

extension Request {
    /// The language of the pages answered to this request.
    var pageLanguage: PageLanguage { PageLanguage.negotiate(headers[.acceptLanguage]) }
}

/// Every sentence a page shows, per language.
enum Strings {
    static func table(_ language: PageLanguage) -> [String: String] {
        language == .english ? english : chinese
    }

    static let english: [String: String] = [
        "signInTitle": "Sign in",
        "signInHeading": "Sign in",
        "signInIntro": "Use your Apple Account to sign in. Apple asks you what to share: you can hide your email behind a private relay address.",
        "alreadySignedIn": "You are already signed in.",
        "viewSession": "View your session",
        "sessionTitle": "Your session",
        "sessionHeading": "You are signed in",
        "name": "Name",
        "email": "Email",
        "notShared": "Not shared",
        "privateRelay": "Private relay address (Hide My Email)",
        "appleID": "Apple user ID",
        "signedInAt": "Signed in",
        "expiresAt": "Session expires",
        "signOut": "Sign out",
        "localModeNotice": "Local mode: Apple is emulated on this machine. No real Apple Account is used.",
        "languageNote": "Language follows your browser (English, 简体中文).",
        "signIn.title.signIn": "Sign in with Apple",
        "signIn.title.continue": "Continue with Apple",
        "signIn.title.signUp": "Sign up with Apple",
        "tryAgain": "Try again",
        "goToSignIn": "Go to the sign-in page",
        "goHome": "Go to the home page",
        "error.cancelled.heading": "Sign-in cancelled",
        "error.cancelled.message": "You cancelled signing in with Apple. Nothing was shared. You can try again whenever you like.",
        "error.expired.heading": "This sign-in link has expired or was already used",
        "error.expired.message": "Sign-in links work once and for 10 minutes, in the browser that started them. Start again from the sign-in page.",
        "error.malformed.heading": "The answer from Apple was incomplete",
        "error.malformed.message": "The sign-in could not be read. Start again from the sign-in page; if it keeps happening, tell the site's operators.",
        "error.notVerified.heading": "Apple's answer could not be verified",
        "error.notVerified.message": "For your safety the sign-in was stopped because it did not pass our checks. Start again from the sign-in page.",
        "error.unavailable.heading": "Apple could not be reached",
        "error.unavailable.message": "Signing in needs Apple's servers, which did not answer in time. Please try again in a minute.",
        "error.misconfigured.heading": "Sign in with Apple is not set up correctly",
        "error.misconfigured.message": "This is a problem on our side, not yours: the server's Apple credentials were refused. The operators have been told in the log.",
        "error.storeUnavailable.heading": "The service is briefly unavailable",
        "error.storeUnavailable.message": "Our database did not answer. Nothing you did caused this; please try again in a minute.",
        "error.tooLarge.heading": "The sign-in request was too large",
        "error.tooLarge.message": "The data sent to the sign-in page was larger than allowed. Start again from the sign-in page.",
        "error.csrf.heading": "This form has expired",
        "error.csrf.message": "The form was not sent from this page or is too old. Reload the page and try again.",
        "error.notFound.heading": "Page not found",
        "error.notFound.message": "There is nothing at this address.",
        "error.signedOut.heading": "You are not signed in",
        "error.signedOut.message": "Sign in to see your session.",
        "error.badGateway.heading": "The site could not be reached",
        "error.badGateway.message": "The site behind this sign-in did not accept the connection. Nothing you did caused this; please try again in a minute.",
        "error.gatewayTimeout.heading": "The site took too long to answer",
        "error.gatewayTimeout.message": "The site behind this sign-in did not answer in time. Nothing you did caused this; please try again in a minute.",
        "error.closed.heading": "This address is closed",
        "error.closed.message": "This site's access rules close this address to everyone, signed in or not. If you need it, ask the people who run the site.",
        "error.badTarget.heading": "This address cannot be opened",
        "error.badTarget.message": "The address asked for is not one this site accepts (it may hold an odd encoding or climb above the site's root). Check the link, or start again from the site's home page.",
        "error.badUpstream.heading": "The site gave an answer that cannot be passed on",
        "error.badUpstream.message": "The site behind this sign-in answered in a way this sign-in does not pass on. Nothing you did caused this; please try again in a minute.",
        "error.timedOut.heading": "The request took too long to arrive",
        "error.timedOut.message": "Your request did not arrive in time. Please try again.",
        "error.busy.heading": "The site is busy",
        "error.busy.message": "Too many requests are waiting for the site behind this sign-in. Please try again in a minute.",
        "error.internal.heading": "Something went wrong",
        "error.internal.message": "The server could not finish your request. Please try again.",
        "forwardingDisabled": "You have turned off email forwarding for this site in your Apple Account settings, so emails to your relay address will not reach you.",
        "deleteLink": "Delete my account",
        "deleteHeading": "Delete your account",
        "deleteExplain": "This deletes your profile and sessions here and tells Apple to stop Sign in with Apple for this site. It cannot be undone.",
        "deleteConfirm": "Yes, delete my account",
        "deleteButton": "Delete account",
        "cancel": "Cancel",
        "deletedHeading": "Your account has been deleted",
        "deleted.revoked": "Your data is gone and Apple has been told. You can sign in again at any time as a new user.",
        "deleted.queued": "Your data is gone. Apple could not be reached just now; we will tell Apple automatically as soon as it answers.",
        "deleted.none": "Your data is gone.",
        "signOutHeading": "Sign out",
        "signOutExplain": "You are signed in as",
        "signOutButton": "Sign out",
        "deniedHeading": "You do not have access",
        "deniedExplain": "This site does not let in the Apple account you are signed in with:",
        "deniedAction": "Sign out, then sign in with an Apple account that has access, or ask the site's owner to add yours.",
        "popupButton": "Continue with Apple",
        "popupHint": "Opens Apple's sign-in in a pop-up window; this page stays open.",
        "popupBlocked": "Your browser blocked the pop-up window. Allow pop-ups for this site, or use the button above.",
        "popupNetworkError": "The server could not be reached. Check your connection and try again.",
        "error.rateLimited.heading": "Too many sign-in attempts",
        "error.rateLimited.message": "Please wait a minute, then try again.",
        "error.revoked.heading": "You stopped using Sign in with Apple here",
        "error.revoked.message": "Sign in again to continue.",
        "error.oidcClient.heading": "This app is not registered here",
        "error.oidcClient.message": "The app that sent you asked to sign in with a client this site does not know, or from an address it has not registered, so you were not sent on. Tell the app's owner; nothing was shared.",
        "error.oidcRequest.heading": "This sign-in request is not valid",
        "error.oidcRequest.message": "The app that sent you made a request this site cannot answer. Go back to the app and try again; if it keeps happening, tell the app's owner.",
        "error.oidcLogout.heading": "Signed-out page not registered",
        "error.oidcLogout.message": "The app asked to send you after signing out to an address it has not registered, so you were not sent there. Nothing was changed.",
        "endSessionHeading": "Sign out",
        "endSessionExplain": "The app you came from asks to end your session here. You are signed in as",
        "endSessionButton": "Sign out",
    ]

    static let chinese: [String: String] = [
        "signInTitle": "登录",
        "signInHeading": "登录",
        "signInIntro": "使用你的 Apple 账户登录。Apple 会询问你要共享哪些信息：你可以用私密中转地址隐藏你的电子邮件。",
        "alreadySignedIn": "你已登录。",
        "viewSession": "查看你的会话",
        "sessionTitle": "你的会话",
        "sessionHeading": "你已登录",
        "name": "姓名",
        "email": "电子邮件",
        "notShared": "未共享",
        "privateRelay": "私密中转地址（隐藏邮件地址）",
        "appleID": "Apple 用户 ID",
        "signedInAt": "登录时间",
        "expiresAt": "会话到期",
        "signOut": "退出登录",
        "localModeNotice": "本地模式：Apple 在本机上模拟，不使用真实的 Apple 账户。",
        "languageNote": "语言随浏览器设置（English、简体中文）。",
        "signIn.title.signIn": "通过 Apple 登录",
        "signIn.title.continue": "通过 Apple 继续",
        "signIn.title.signUp": "通过 Apple 注册",
        "tryAgain": "重试",
        "goToSignIn": "前往登录页面",
        "goHome": "前往首页",
        "error.cancelled.heading": "已取消登录",
        "error.cancelled.message": "你取消了通过 Apple 登录，没有共享任何信息。你可以随时重试。",
        "error.expired.heading": "此登录链接已过期或已被使用",
        "error.expired.message": "登录链接只能在发起登录的浏览器中使用一次，有效期 10 分钟。请从登录页面重新开始。",
        "error.malformed.heading": "来自 Apple 的应答不完整",
        "error.malformed.message": "无法读取此次登录。请从登录页面重新开始；如果反复出现，请告知网站运维人员。",
        "error.notVerified.heading": "无法验证 Apple 的应答",
        "error.notVerified.message": "为了你的安全，此次登录未通过我们的检查，已被停止。请从登录页面重新开始。",
        "error.unavailable.heading": "无法连接 Apple",
        "error.unavailable.message": "登录需要 Apple 的服务器，但它没有及时应答。请一分钟后重试。",
        "error.misconfigured.heading": "通过 Apple 登录的配置有误",
        "error.misconfigured.message": "这是我们这边的问题，不是你的问题：服务器的 Apple 凭据被拒绝。运维人员已在日志中收到通知。",
        "error.storeUnavailable.heading": "服务暂时不可用",
        "error.storeUnavailable.message": "我们的数据库没有应答。这不是你的操作导致的，请一分钟后重试。",
        "error.tooLarge.heading": "登录请求过大",
        "error.tooLarge.message": "发送到登录页面的数据超过了允许的大小。请从登录页面重新开始。",
        "error.csrf.heading": "此表单已过期",
        "error.csrf.message": "该表单不是从本页面发送的，或已过期。请刷新页面后重试。",
        "error.notFound.heading": "找不到页面",
        "error.notFound.message": "此地址没有内容。",
        "error.signedOut.heading": "你尚未登录",
        "error.signedOut.message": "登录后即可查看你的会话。",
        "error.badGateway.heading": "无法连接到网站",
        "error.badGateway.message": "登录服务后面的网站没有接受连接。这不是你的操作导致的，请一分钟后重试。",
        "error.gatewayTimeout.heading": "网站响应超时",
        "error.gatewayTimeout.message": "登录服务后面的网站没有及时响应。这不是你的操作导致的，请一分钟后重试。",
        "error.closed.heading": "此地址不开放",
        "error.closed.message": "此网站的访问规则对所有人关闭了此地址，无论是否已登录。如需访问，请联系网站的管理者。",
        "error.badTarget.heading": "无法打开此地址",
        "error.badTarget.message": "所请求的地址不被此网站接受（可能含有异常的编码，或越出了网站的根目录）。请检查链接，或从网站首页重新开始。",
        "error.badUpstream.heading": "网站的响应无法转发",
        "error.badUpstream.message": "登录服务后面的网站以无法转发的方式作出了响应。这不是你的操作导致的，请一分钟后重试。",
        "error.timedOut.heading": "请求到达超时",
        "error.timedOut.message": "你的请求没有及时到达。请重试。",
        "error.busy.heading": "网站繁忙",
        "error.busy.message": "等待登录服务后面网站的请求过多。请一分钟后重试。",
        "error.internal.heading": "出现了问题",
        "error.internal.message": "服务器无法完成你的请求，请重试。",
        "forwardingDisabled": "你已在 Apple 账户设置中关闭了此网站的邮件转发，发往你的中转地址的邮件将无法送达。",
        "deleteLink": "删除我的账户",
        "deleteHeading": "删除你的账户",
        "deleteExplain": "这将删除你在本站的资料和会话，并通知 Apple 停止本站的“通过 Apple 登录”。此操作无法撤销。",
        "deleteConfirm": "是的，删除我的账户",
        "deleteButton": "删除账户",
        "cancel": "取消",
        "deletedHeading": "你的账户已删除",
        "deleted.revoked": "你的数据已删除，且已通知 Apple。你可以随时以新用户身份重新登录。",
        "deleted.queued": "你的数据已删除。暂时无法连接 Apple；一旦 Apple 应答，我们会自动通知 Apple。",
        "deleted.none": "你的数据已删除。",
        "signOutHeading": "退出登录",
        "signOutExplain": "你当前登录的账户是",
        "signOutButton": "退出登录",
        "deniedHeading": "你没有访问权限",
        "deniedExplain": "本站不允许你当前登录的 Apple 账户访问：",
        "deniedAction": "请先退出登录，再用有权限的 Apple 账户登录，或请网站管理员添加你的账户。",
        "popupButton": "通过 Apple 继续",
        "popupHint": "在弹出窗口中打开 Apple 登录，本页面保持打开。",
        "popupBlocked": "浏览器阻止了弹出窗口。请允许本站弹出窗口，或使用上面的按钮。",
        "popupNetworkError": "无法连接服务器。请检查网络后重试。",
        "error.rateLimited.heading": "登录尝试过于频繁",
        "error.rateLimited.message": "请等待一分钟后再试。",
        "error.revoked.heading": "你已停止在本站使用“通过 Apple 登录”",
        "error.revoked.message": "请重新登录以继续。",
        "error.oidcClient.heading": "此应用未在本站注册",
        "error.oidcClient.message": "把你带到这里的应用使用了本站不认识的客户端，或来自未注册的地址，因此没有继续。请告知该应用的所有者；没有共享任何信息。",
        "error.oidcRequest.heading": "此登录请求无效",
        "error.oidcRequest.message": "把你带到这里的应用发出了本站无法处理的请求。请返回该应用重试；如果问题持续，请告知应用的所有者。",
        "error.oidcLogout.heading": "退出后的页面未注册",
        "error.oidcLogout.message": "该应用要求在退出登录后把你带到一个未注册的地址，因此没有跳转。没有做任何更改。",
        "endSessionHeading": "退出登录",
        "endSessionExplain": "你来自的应用请求结束你在本站的会话。你当前登录的账户是",
        "endSessionButton": "退出登录",
    ]
}
