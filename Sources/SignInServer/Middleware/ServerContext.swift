import Hummingbird
import NIOCore

/// The request context of the web front. Hummingbird's request id (`hb.request.id`) is in every log line.
public struct ServerContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer (the proxy, when behind one).
    public let remoteAddress: SocketAddress?
    /// Who is asking, as `SessionMiddleware` found them; `.notLooked` on routes without it.
    var visitor: Visitor = .notLooked

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}


/// The context of a route only a signed-in person may use: the session, its user and the CSRF token their forms
/// carry, resolved once by `SessionMiddleware`. Without a session the route is never reached: the person sees
/// the signed-out page (or, when the store did not answer, the try-again page).
struct SignedInContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let session: SessionRecord
    let user: UserRecord
    /// The token every form of this session must send back.
    var csrfToken: String { session.csrfToken }

    init(context: ServerContext) throws {
        switch context.visitor {
        case .signedIn(let session, let user):
            coreContext = context.coreContext
            self.session = session
            self.user = user
        case .storeUnavailable(let retryURL):
            throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked, .bearer, .badToken:
            throw ErrorPage.signedOut
        }
    }
}
